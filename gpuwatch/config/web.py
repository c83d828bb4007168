"""``[web]``: the daemon's read-only web view and who may see it.

``auth``:

* ``"none"`` — anyone who reaches the daemon's port (the default: the daemon listens on
  127.0.0.1 unless told otherwise; put a proxy in front before opening it wider);
* ``"token"`` — a shared secret (``token`` or ``token_file``), sent as
  ``Authorization: Bearer <token>`` or once as ``?token=<token>``, which sets an HttpOnly
  cookie (holding the token's SHA-256, not the token) and redirects to the clean URL;
* ``"header"`` — trust a reverse proxy that authenticates users and passes the name in
  ``user_header`` (``X-Remote-User``); only ``allowed_users`` get in (``["*"]``: any user
  the proxy names). The proxy must strip that header from client requests.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from pydantic import Field, model_validator

from gpuwatch.config.section import Section, secret_of


class WebAuth(str, Enum):
    NONE = "none"
    TOKEN = "token"
    HEADER = "header"


class WebConfig(Section):
    """``[web]`` section (see the module docstring and ``deploy/gpuwatch.toml``)."""

    enabled: bool = Field(True, description="Serve the web view at / on the daemon's port.")
    auth: WebAuth = Field(WebAuth.NONE, description="'none' | 'token' | 'header'.")
    token: str | None = Field(None, description="auth = 'token': the shared secret (prefer token_file).")
    token_file: Path | None = Field(None, description="auth = 'token': file whose first line is the token.")
    user_header: str = Field("X-Remote-User", description="auth = 'header': the proxy's user header.")
    allowed_users: list[str] = Field(
        default_factory=list, description="auth = 'header': users let in; ['*'] for any the proxy names."
    )
    cookie_name: str = Field("gpuwatch_web", description="Session cookie for auth = 'token'.")
    cookie_secure: bool = Field(False, description="Mark the cookie Secure (set it when served over HTTPS).")

    @model_validator(mode="after")
    def _complete(self) -> WebConfig:
        if self.auth is WebAuth.TOKEN and not (self.token or self.token_file):
            raise ValueError("auth = 'token' needs web.token or web.token_file")
        return self

    def resolve_token(self) -> str | None:
        """The token from ``token`` or ``token_file``; None if neither has one or the file is unreadable."""
        try:
            return secret_of(self.token, self.token_file)
        except OSError:
            return None
