"""The request path: a call from its arrival to its answer (proxy.py reads top to
bottom), each step a module: payloads, classify, policy, chain, relay, upstream,
protocols/ (translation between client and upstream kinds), the response cache and
finish.py (settle the quota, write the audit record).
"""
