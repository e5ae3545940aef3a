class NoOptions:
    """OPTIONS is not offered (the schema at /api/v1/schema/ describes every endpoint), so it
    answers 405 and the Allow header never lists it."""

    http_method_names = ["get", "post", "put", "patch", "delete", "head"]
