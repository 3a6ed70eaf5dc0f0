"""An MCP client that reaches graphrelay's /mcp through OAuth alone, with the official Python SDK.

Driven by relay/tests/oauth_clients.rs. It starts with no token: the SDK's own OAuth client
(`mcp.client.auth.OAuthClientProvider`) discovers the protected resource and the authorization
server, registers itself dynamically, and sends the owner to the authorization URL. The redirect
handler plays the owner with plain HTTP (sign-in form, then consent form) and takes the code from
the final redirect without following it. Then the client lists the tools, calls
`list_graph_sessions`, sleeps past the access token's lifetime and calls it again, which the SDK
can only do with a refreshed token.

Prints one JSON line on stdout; exits 1 with `mcp_oauth_client: error: ...` on stderr on any
failure.

    python mcp_oauth_client.py --base http://127.0.0.1:PORT --owner alice --password '...' \
        --project PROJECT_ID --sleep-seconds 4

With `--reauthorize-with-session GS_ID` it instead authorizes the same registered client twice
for the project, as a host that lost its tokens does, queues a run of that session under one
idempotency key from the first grant, and reads it and queues it again from the second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import traceback
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

CLIENT_NAME = "Python SDK test"
SCOPES = ("osfoundry:read", "osfoundry:run")
# Pages of the owner's part are small; a bound keeps a runaway page from filling memory.
MAX_PAGE_BYTES = 1_000_000


class FlowFailure(Exception):
    """A step of the flow did not go as the server's contract says."""


# --- Token storage that counts what the SDK stores ------------------------------------------


@dataclass
class CountingStorage:
    """In-memory `TokenStorage` that remembers every token set the SDK stores."""

    tokens: list[OAuthToken] = field(default_factory=list)
    client_info: OAuthClientInformationFull | None = None
    client_info_sets: int = 0

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens[-1] if self.tokens else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens.append(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info
        self.client_info_sets += 1


# --- HTML forms -----------------------------------------------------------------------------


@dataclass
class Form:
    action: str
    method: str
    inputs: list[dict[str, str | None]] = field(default_factory=list)
    selects: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    buttons: list[dict[str, str | None]] = field(default_factory=list)

    def hidden(self) -> list[tuple[str, str]]:
        return [
            (i["name"] or "", i.get("value") or "")
            for i in self.inputs
            if (i.get("type") or "").lower() == "hidden" and i.get("name")
        ]


class FormParser(HTMLParser):
    """Collects each form's inputs, selects (with options) and buttons."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[Form] = []
        self._form: Form | None = None
        self._select: str | None = None
        self._option: dict[str, Any] | None = None
        self._button: dict[str, Any] | None = None
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form":
            self._form = Form(action=a.get("action") or "", method=(a.get("method") or "get").lower())
            self.forms.append(self._form)
        elif self._form is None:
            return
        elif tag == "input":
            self._form.inputs.append(a)
        elif tag == "select":
            self._select = a.get("name") or ""
            self._form.selects[self._select] = []
        elif tag == "option" and self._select is not None:
            self._option = {"value": a.get("value"), "text": ""}
        elif tag == "button":
            self._button = {"name": a.get("name"), "value": a.get("value"), "text": ""}

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None
        elif tag == "select":
            self._select = None
        elif tag == "option" and self._option is not None and self._form is not None and self._select is not None:
            text = self._option["text"].strip()
            value = self._option["value"] if self._option["value"] is not None else text
            self._form.selects[self._select].append((value, text))
            self._option = None
        elif tag == "button" and self._button is not None and self._form is not None:
            self._button["text"] = self._button["text"].strip()
            self._form.buttons.append(self._button)
            self._button = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._option is not None:
            self._option["text"] += data
        if self._button is not None:
            self._button["text"] += data


def parse_page(html: str) -> FormParser:
    parser = FormParser()
    parser.feed(html)
    parser.close()
    return parser


def form_posting_to(page: FormParser, path: str, what: str) -> Form:
    for form in page.forms:
        if form.method == "post" and urlparse(form.action).path.endswith(path):
            return form
    actions = [(f.method, f.action) for f in page.forms]
    raise FlowFailure(f"the {what} has no <form method=post> to …{path} (forms: {actions})")


# --- The owner's part, over plain HTTP ------------------------------------------------------


class Owner:
    """Signs in and consents as a browser would: cookies kept, redirects looked at one by one.

    Cookies are kept by hand, by name, for the one host: a browser sends `Secure` cookies to a
    loopback `http://` origin (a secure context), which Python's cookie jar refuses to do.
    """

    def __init__(self, http: httpx2.AsyncClient, owner: str, password: str, project: str, redirect_uri: str):
        self.http = http
        self.owner = owner
        self.password = password
        self.project = project
        self.redirect_uri = redirect_uri
        self.cookies: dict[str, str] = {}
        self.result: AuthorizationCodeResult | None = None
        self.authorizations = 0
        self.consent_named_client = False
        self.consent_named_redirect_host = False

    async def request(self, method: str, url: str, data: list[tuple[str, str]] | None = None) -> httpx2.Response:
        headers = {}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if data is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            content = urlencode(data).encode()
        else:
            content = None
        response = await self.http.request(method, url, headers=headers, content=content, follow_redirects=False)
        await response.aread()
        if len(response.content) > MAX_PAGE_BYTES:
            raise FlowFailure(f"{method} {url}: page over {MAX_PAGE_BYTES} bytes")
        for header in response.headers.get_list("set-cookie"):
            pair = header.split(";", 1)[0]
            if "=" in pair:
                name, value = pair.split("=", 1)
                self.cookies[name.strip()] = value.strip()
        self.http.cookies.clear()
        return response

    async def redirect_handler(self, authorization_url: str) -> None:
        """The SDK's redirect handler: does the owner's whole part and keeps the code."""
        self.authorizations += 1
        page_url = authorization_url
        response = await self.request("GET", page_url)
        if response.status_code != 200:
            raise FlowFailure(f"GET the authorization URL: HTTP {response.status_code}: {response.text[:500]}")
        page = parse_page(response.text)
        if any(urlparse(f.action).path.endswith("/oauth/sign-in") for f in page.forms):
            page_url, page = await self.sign_in(page_url, page)
        await self.consent(page_url, page)

    async def sign_in(self, page_url: str, page: FormParser) -> tuple[str, FormParser]:
        form = form_posting_to(page, "/oauth/sign-in", "sign-in page")
        fields = dict(form.hidden())
        for name in ("csrf", "return_to"):
            if name not in fields:
                raise FlowFailure(f"the sign-in form has no hidden `{name}`")
        data = form.hidden() + [("username", self.owner), ("password", self.password)]
        response = await self.request("POST", urljoin(page_url, form.action), data)
        if response.status_code == 401:
            raise FlowFailure("sign-in refused (HTTP 401): wrong owner name or password")
        if response.status_code == 429:
            raise FlowFailure(f"sign-in throttled (HTTP 429, Retry-After {response.headers.get('retry-after')})")
        if response.status_code != 303:
            raise FlowFailure(f"sign-in: expected 303, got HTTP {response.status_code}: {response.text[:500]}")
        back = urljoin(page_url, response.headers["location"])
        response = await self.request("GET", back)
        if response.status_code != 200:
            raise FlowFailure(f"GET the authorization URL after sign-in: HTTP {response.status_code}")
        return back, parse_page(response.text)

    async def consent(self, page_url: str, page: FormParser) -> None:
        form = form_posting_to(page, "/oauth/authorize", "consent page")
        text = " ".join(page.text)
        self.consent_named_client = CLIENT_NAME in text
        self.consent_named_redirect_host = (urlparse(self.redirect_uri).hostname or "") in text
        hidden = dict(form.hidden())
        for name in ("csrf", "authorization"):
            if name not in hidden:
                raise FlowFailure(f"the consent form has no hidden `{name}`")
        options = form.selects.get("project", [])
        if self.project not in [value for value, _ in options]:
            raise FlowFailure(f"project {self.project} is not offered on the consent page (options: {options})")
        offered = {i.get("value") for i in form.inputs if (i.get("type") or "") == "checkbox" and i.get("name") == "scope"}
        if not set(SCOPES) <= offered:
            raise FlowFailure(f"the consent page offers scopes {sorted(map(str, offered))}, not {list(SCOPES)}")
        if not any(b.get("name") == "decision" and b.get("value") == "allow" for b in form.buttons):
            raise FlowFailure(f"the consent page has no Allow button (buttons: {form.buttons})")
        data = form.hidden() + [("project", self.project)] + [("scope", s) for s in SCOPES] + [("decision", "allow")]
        response = await self.request("POST", urljoin(page_url, form.action), data)
        if response.status_code != 303:
            raise FlowFailure(f"consent: expected 303, got HTTP {response.status_code}: {response.text[:500]}")
        location = response.headers["location"]
        if not location.startswith(self.redirect_uri):
            raise FlowFailure(f"consent redirected to {location}, not to {self.redirect_uri}")
        query = parse_qs(urlparse(location).query)
        if "error" in query:
            raise FlowFailure(f"consent redirected with error={query['error'][0]}")
        if "code" not in query or "state" not in query:
            raise FlowFailure(f"consent redirect has no code and state: {location}")
        iss = query.get("iss", [None])[0]
        self.result = AuthorizationCodeResult(code=query["code"][0], state=query["state"][0], iss=iss)

    async def callback_handler(self) -> AuthorizationCodeResult:
        """The SDK's callback handler: the code the redirect handler took."""
        if self.result is None:
            raise FlowFailure("the redirect handler produced no authorization code")
        result, self.result = self.result, None
        return result


# --- The MCP session ------------------------------------------------------------------------


@dataclass
class Wire:
    """What went over HTTP: the bearer of each /mcp request and each token request's grant."""

    mcp_bearers: list[str | None] = field(default_factory=list)
    grants: list[str] = field(default_factory=list)

    async def on_request(self, request: httpx2.Request) -> None:
        path = request.url.path
        if path.endswith("/mcp") and request.method == "POST":
            auth = request.headers.get("authorization", "")
            self.mcp_bearers.append(auth[len("Bearer ") :] if auth.startswith("Bearer ") else None)
        elif path.endswith("/oauth/token"):
            form = parse_qs(request.content.decode(errors="replace"))
            self.grants.append(form.get("grant_type", ["?"])[0])


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def structured(result: Any, what: str) -> Any:
    if result.is_error:
        raise FlowFailure(f"{what} failed: {result.content}")
    if result.structured_content is None:
        raise FlowFailure(f"{what} answered without structuredContent: {result.content}")
    return result.structured_content


async def run(args: argparse.Namespace) -> dict[str, Any]:
    base = args.base.rstrip("/")
    redirect_uri = f"http://127.0.0.1:{free_loopback_port()}/callback"
    storage = CountingStorage()
    wire = Wire()
    async with httpx2.AsyncClient(timeout=30.0) as owner_http:
        owner = Owner(owner_http, args.owner, args.password, args.project, redirect_uri)
        metadata = OAuthClientMetadata(
            client_name=CLIENT_NAME,
            redirect_uris=[redirect_uri],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        )
        provider = OAuthClientProvider(
            server_url=f"{base}/mcp",
            client_metadata=metadata,
            storage=storage,
            redirect_handler=owner.redirect_handler,
            callback_handler=owner.callback_handler,
        )
        mcp_http = httpx2.AsyncClient(
            auth=provider,
            timeout=httpx2.Timeout(30.0, read=300.0),
            event_hooks={"request": [wire.on_request]},
        )
        async with mcp_http, Client(streamable_http_client(f"{base}/mcp", http_client=mcp_http), mode=args.mode) as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            call = {"project_id": args.project, "limit": 10}
            first = structured(await client.call_tool("list_graph_sessions", call), "the first list_graph_sessions")
            tokens_before_sleep = len(storage.tokens)
            await asyncio.sleep(args.sleep_seconds)
            before_second = len(wire.mcp_bearers)
            second = structured(await client.call_tool("list_graph_sessions", call), "the second list_graph_sessions")
            protocol_version = client.session.protocol_version
    access = [t.access_token for t in storage.tokens]
    second_bearers = wire.mcp_bearers[before_second:]
    return {
        "protocol_version": protocol_version,
        "tools": tools,
        "first_call": first,
        "second_call": second,
        "client_id": storage.client_info.client_id if storage.client_info else None,
        "registrations": storage.client_info_sets,
        "authorizations": owner.authorizations,
        "consent_named_client": owner.consent_named_client,
        "consent_named_redirect_host": owner.consent_named_redirect_host,
        "token_sets": len(storage.tokens),
        "token_sets_before_sleep": tokens_before_sleep,
        "token_grants": wire.grants,
        "refreshed": "refresh_token" in wire.grants and len(storage.tokens) > tokens_before_sleep,
        "access_tokens_distinct": len(set(access)) == len(access),
        "refresh_tokens_rotated": len({t.refresh_token for t in storage.tokens}) == len(storage.tokens),
        "granted_scope": storage.tokens[-1].scope if storage.tokens else None,
        "expires_in": storage.tokens[-1].expires_in if storage.tokens else None,
        "second_call_used_refreshed_token": bool(second_bearers)
        and len(access) >= 2
        and all(b == access[-1] for b in second_bearers)
        and access[-1] != access[0],
        "mcp_requests": len(wire.mcp_bearers),
    }


async def connect_once(
    base: str, owner: Owner, storage: CountingStorage, redirect_uri: str, mode: str, calls
) -> Any:
    """One MCP session through the SDK's OAuth client over `storage`; `calls(client)`'s answer."""
    metadata = OAuthClientMetadata(
        client_name=CLIENT_NAME,
        redirect_uris=[redirect_uri],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    provider = OAuthClientProvider(
        server_url=f"{base}/mcp",
        client_metadata=metadata,
        storage=storage,
        redirect_handler=owner.redirect_handler,
        callback_handler=owner.callback_handler,
    )
    mcp_http = httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30.0, read=300.0))
    async with mcp_http, Client(streamable_http_client(f"{base}/mcp", http_client=mcp_http), mode=mode) as client:
        return await calls(client)


async def run_reauthorized(args: argparse.Namespace) -> dict[str, Any]:
    """The same registered client authorized twice for the same project, as a host that lost its
    tokens does: the second grant reads the first grant's run and gets it back for its key."""
    base = args.base.rstrip("/")
    redirect_uri = f"http://127.0.0.1:{free_loopback_port()}/callback"
    key = "python-reauthorized-key"
    queue = {"graph_session_id": args.session, "arguments": {}, "idempotency_key": key}
    first_storage = CountingStorage()
    async with httpx2.AsyncClient(timeout=30.0) as owner_http:
        owner = Owner(owner_http, args.owner, args.password, args.project, redirect_uri)

        async def first_calls(client: Any) -> Any:
            return structured(await client.call_tool("run_graph_session", queue), "the first grant's run")

        ticket = await connect_once(base, owner, first_storage, redirect_uri, args.mode, first_calls)
        command = ticket["command_id"]
        # The tokens are gone; the registration is kept (the same client asks again).
        second_storage = CountingStorage(client_info=first_storage.client_info)

        async def second_calls(client: Any) -> Any:
            read = structured(
                await client.call_tool("get_graph_run", {"command_id": command}), "the second grant's read"
            )
            again = structured(await client.call_tool("run_graph_session", queue), "the second grant's retry")
            return read, again

        read, again = await connect_once(base, owner, second_storage, redirect_uri, args.mode, second_calls)
    return {
        "client_id": first_storage.client_info.client_id if first_storage.client_info else None,
        "registrations": first_storage.client_info_sets + second_storage.client_info_sets,
        "authorizations": owner.authorizations,
        "first_command": command,
        "second_read": read,
        "second_ticket": again,
        "access_tokens": [first_storage.tokens[-1].access_token, second_storage.tokens[-1].access_token],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the service's base URL, without /mcp")
    parser.add_argument("--owner", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--project", required=True, help="the project id to consent to")
    parser.add_argument("--sleep-seconds", type=float, default=0.0, help="longer than the access token lives")
    parser.add_argument(
        "--reauthorize-with-session",
        dest="session",
        help="authorize the same client twice and queue a run of this graph session under one key from each grant",
    )
    parser.add_argument("--mode", default="auto", help="the SDK's connect mode: auto (default) or legacy")
    parser.add_argument("--timeout-seconds", type=float, default=120.0, help="for the whole flow")
    args = parser.parse_args()
    try:
        flow = run_reauthorized(args) if args.session else run(args)
        report = asyncio.run(asyncio.wait_for(flow, args.timeout_seconds))
    except BaseException as error:  # noqa: BLE001 - every failure ends in one clear message
        traceback.print_exc(file=sys.stderr)
        print(f"mcp_oauth_client: error: {describe(error)}", file=sys.stderr)
        return 1
    print(json.dumps(report))
    return 0


def describe(error: BaseException) -> str:
    """The innermost causes, with task-group wrappers taken apart."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(describe(e) for e in error.exceptions)
    if isinstance(error, (TimeoutError, asyncio.TimeoutError)):
        return "timed out"
    return f"{type(error).__name__}: {error}"


if __name__ == "__main__":
    sys.exit(main())
