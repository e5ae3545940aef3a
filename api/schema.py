"""How the schema describes our authentication (loaded by ApiConfig.ready)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ManagementTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.authentication.ManagementTokenAuthentication"
    name = "managementToken"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A management token, sk-sluice-admin-… (manage.py issue_admin_token).",
        }


class ConsoleSessionScheme(OpenApiAuthenticationExtension):
    target_class = "api.authentication.ConsoleSessionAuthentication"
    name = "consoleSession"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "cookie",
            "name": "sessionid",
            "description": "The console's login; unsafe methods also need X-CSRFToken.",
        }
