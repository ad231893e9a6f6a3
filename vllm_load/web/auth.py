"""`--web-login`: a username/password login in front of the whole web UI (Locust's and `/llm`).

Locust's `--web-login` only puts a login page in front of its routes; the login itself is the
locustfile's to provide. This one has a single account: the user name from `--web-user`, the
password only from the environment variable `VLLM_LOAD_WEB_PASSWORD` (never a command-line
argument or a file, so it shows in no process list, run.json or log). Passwords
are compared with `hmac.compare_digest`; sessions are signed with a random key made at start,
so they end when the process does. Wrong passwords are slowed down per client address and
across all of them (`throttle.LoginThrottle`).

This is access control for a UI on a trusted network, not transport security: put TLS in front
(or Locust's `--tls-cert`/`--tls-key`) before exposing it.
"""

from __future__ import annotations

import hmac
import logging
import math
import os
import secrets
import sys

from .throttle import LoginThrottle

PASSWORD_ENV = "VLLM_LOAD_WEB_PASSWORD"
DEFAULT_USER = "admin"
MISSING_PASSWORD = (
    f"--web-login needs the web UI password in the environment variable {PASSWORD_ENV} "
    f"(it is never taken from the command line or a file)"
)
# the JSON endpoints answer 401 without a login (a script gets a status, not a login page)
JSON_PATHS = ("/llm/stats",)

logger = logging.getLogger("vllm_load")


def web_password() -> str:
    return os.environ.get(PASSWORD_ENV, "")


def add_arguments(parser) -> None:
    """--web-user on Locust's parser (with --web-login, Locust's own flag); kept out of the UI's form."""
    hidden = {"include_in_web_ui": False} if hasattr(parser, "args_included_in_web_ui") else {}
    parser.add_argument(
        "--web-user",
        default=DEFAULT_USER,
        help=f"user name for --web-login (the password comes only from ${PASSWORD_ENV})",
        **hidden,
    )


def credentials_match(
    username: str, password: str, expected_user: str, expected_password: str
) -> bool:
    """Both compared in constant time (and both always compared), as UTF-8 bytes."""
    user_ok = hmac.compare_digest(username.encode("utf-8"), expected_user.encode("utf-8"))
    password_ok = hmac.compare_digest(password.encode("utf-8"), expected_password.encode("utf-8"))
    return user_ok and password_ok and bool(expected_password)


def install_login(environment, web_ui) -> None:
    """The login for a web UI started with --web-login; exits with one line if there is no password."""
    password = web_password()
    if not password:
        print(f"vllm-load: error: {MISSING_PASSWORD}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    from flask import Blueprint, jsonify, redirect, request, session, url_for
    from flask_login import UserMixin, login_user

    options = environment.parsed_options
    username = getattr(options, "web_user", None) or DEFAULT_USER
    base_path = getattr(options, "web_base_path", "") or ""

    class WebUser(UserMixin):
        def __init__(self, name: str) -> None:
            self.id = name

    app = web_ui.app
    app.config["SECRET_KEY"] = secrets.token_bytes(32)
    app.config["SESSION_COOKIE_HTTPONLY"] = True
    app.config["SESSION_COOKIE_SAMESITE"] = (
        "Lax"  # no session cookie on another site's POST to /swarm
    )
    manager = web_ui.login_manager

    @manager.user_loader
    def load_user(user_id: str):
        return (
            WebUser(user_id)
            if hmac.compare_digest(user_id.encode("utf-8"), username.encode("utf-8"))
            else None
        )

    @manager.unauthorized_handler
    def unauthorized():
        if request.path.endswith(JSON_PATHS):
            return jsonify({"error": "login required"}), 401
        return redirect(url_for("locust.login"))

    blueprint = Blueprint("vllm_load_auth", __name__, url_prefix=base_path or None)
    throttle = LoginThrottle()

    @blueprint.route("/login_submit", methods=["POST"])
    def login_submit():
        client = request.remote_addr or "?"
        wait = throttle.wait_for(client)
        if wait > 0:  # turned away unchecked: a guess that is not tried cannot succeed
            session["auth_error"] = f"Too many failed logins: try again in {math.ceil(wait)} s"
            return redirect(url_for("locust.login"))
        given_user = request.form.get("username", "")
        given_password = request.form.get("password", "")
        if credentials_match(given_user, given_password, username, password):
            throttle.succeeded(client)
            login_user(WebUser(username))
            session["auth_error"] = None
            return redirect(url_for("locust.index"))
        wait = throttle.failed(client)
        logger.warning(
            "web UI: refused a login from %s%s",
            client,
            f" (its next try waits {wait:.0f} s)" if wait > 0 else "",
        )
        session["auth_error"] = "Invalid username or password"
        return redirect(url_for("locust.login"))

    app.register_blueprint(blueprint)
    web_ui.auth_args = {"username_password_callback": f"{base_path}/login_submit"}
    logger.info("web UI login required (user %s)", username)
