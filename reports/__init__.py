"""Read-only reports over the rollups and the audit trail: usage, requested vs
served, capacity weather and the call explorer. No models: it reads accounts,
quotas and routing; the console and the API show it.
"""
