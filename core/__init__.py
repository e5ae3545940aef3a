"""Plumbing every app uses: database helpers, refreshing caches, background tasks, the Redis
client, error responses in OpenAI's shape, call outcomes and lease renewal. Imports no app."""
