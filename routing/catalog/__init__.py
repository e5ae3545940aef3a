"""The catalog: the routes and deployments as the proxy sees them (specs.py), the
config file applied and exported, the services that write routing's models, the
selectors that read them, and the cache invalidation after a change.
"""
