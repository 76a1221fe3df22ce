"""The web app's OpenAPI 3.1 description (``GET /openapi.json``): it describes every route of the
app's route table and nothing else, it is a valid document whose links resolve, it is served
behind the ``Host`` check without ``auth``, ``docs/openapi.json`` is the description of the full
configuration, and the defects Schemathesis found against it stay fixed (each with the input it
found; ``tests/test_web_schemathesis.py`` runs Schemathesis itself).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import schemathesis
import sqlalchemy as sa
from starlette.routing import Mount, Route

import dspy_imp
import dspy_imp.web
from dspy_imp.testing import ScriptedLM, call, reply
from dspy_imp.web import _openapi

ROOT = Path(__file__).resolve().parent.parent
DOCS_COPY = ROOT / "docs" / "openapi.json"
HEADER_SCHEME = {"type": "apiKey", "in": "header", "name": "x-forwarded-user"}


def refund(order_id: str) -> str:
    """Refund an order in full."""
    return f"order {order_id} refunded"


def agent() -> Any:
    program = dspy_imp.ReActV2("message -> reply", tools=[refund], needs_approval=[refund])
    program.set_lm(ScriptedLM([reply(calls=[call("refund", {"order_id": "42"}, id="c1")]), reply("Refunded.")]))
    return program


def signed_in(request: Any) -> str | None:
    return request.headers.get("x-forwarded-user") or None


def routes_of(app: Any) -> list[Any]:
    starlette = getattr(app, "asgi", app).app  # App(Guarded(Starlette))
    return list(starlette.routes)


def described(document: dict[str, Any]) -> set[tuple[str, str]]:
    methods = {"get", "put", "post", "delete", "patch", "options", "head", "trace"}
    return {(path, m.upper()) for path, item in document["paths"].items() for m in item if m in methods}


def table(app: Any) -> set[tuple[str, str]]:
    """The route table as (OpenAPI path, method): a path id is ``{id}``, HEAD goes with GET."""
    out = set()
    for route in routes_of(app):
        if isinstance(route, Mount):
            out.add((route.path + "/{path}", "GET"))  # static files: GET (and HEAD)
            continue
        assert isinstance(route, Route), route
        path = route.path.replace("{key:conversation}", "{id}")
        out |= {(path, m) for m in route.methods or () if m != "HEAD"}
    return out


async def get(app: Any, path: str, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as client:
        return await client.request(kwargs.pop("method", "GET"), path, **kwargs)


def validator(document: dict[str, Any], schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    """A validator of ``schema`` whose ``#/components/...`` references resolve in ``document``."""
    return jsonschema.Draft202012Validator({**document, **schema})


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'chat.db'}"


@pytest.mark.parametrize("auth", [False, True])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_every_route_is_described_and_nothing_else(kind: str, auth: bool, db_url: str) -> None:
    store = dspy_imp.web.DatabaseStore(db_url) if kind == "sqlite" else None
    app = dspy_imp.web.app(agent(), store=store, auth=signed_in if auth else None)
    document = (await get(app, "/openapi.json")).json()
    assert table(app) == described(document)
    assert document["openapi"] == "3.1.0"
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if path in ("/", "/static/{path}", "/openapi.json", "/healthz", "/readyz"):
                assert "security" not in operation and "401" not in operation["responses"]
            else:  # every other route asks `auth`: 401 exactly when there is one
                assert ("401" in operation["responses"]) == auth, (path, method)
                assert operation["security"] == ([{"auth": []}] if auth else [])
            # 503 for a newer database exactly where the store is one that can be newer
            store_route = path not in ("/", "/static/{path}", "/openapi.json", "/healthz", "/readyz")
            if path != "/readyz":  # 503 is how it says "not ready", on every store
                assert ("503" in operation["responses"]) == (kind == "sqlite" and store_route), (path, method)
    # the store's abilities: a memory store cannot list, rename or delete (501)
    for path, method in [("/api/conversations", "get"), ("/api/conversations/{id}", "patch")]:
        assert ("501" in document["paths"][path][method]["responses"]) == (kind == "memory")


async def test_the_description_is_valid_and_its_links_resolve(db_url: str) -> None:
    app = dspy_imp.web.app(agent(), store=dspy_imp.web.DatabaseStore(db_url), auth=signed_in, client_tools=True)
    document = (await get(app, "/openapi.json")).json()
    schema = schemathesis.openapi.from_dict(document)
    operations = [result.ok() for result in schema.get_all_operations()]  # raises on an invalid operation
    assert len(operations) == len(described(document))
    ids = {op["operationId"] for item in document["paths"].values() for op in item.values()}
    links = [
        link
        for item in document["paths"].values()
        for op in item.values()
        for answer in op["responses"].values()
        for link in answer.get("links", {}).values()
    ]
    assert links and all(link["operationId"] in ids for link in links)
    schema.as_state_machine()  # builds every transition: an invalid link raises


async def test_served_behind_the_host_check_and_without_auth() -> None:
    app = dspy_imp.web.app(agent(), auth=lambda request: None)  # refuses everyone
    assert (await get(app, "/api/info")).status_code == 401
    served = await get(app, "/openapi.json")
    assert served.status_code == 200 and served.headers["content-type"] == "application/json"
    assert served.json()["components"]["securitySchemes"] == {"auth": _openapi.DEFAULT_SCHEME}
    rebinding = await get(app, "/openapi.json", headers={"host": "evil.example"})
    assert rebinding.status_code == 403
    # nothing of the agent is in it: its tools and signature are /api/info's, behind auth
    assert "refund" not in served.text and "message -> reply" not in served.text


def test_the_auth_scheme_is_checked() -> None:
    with pytest.raises(dspy_imp.ConfigurationError, match="`auth_scheme` must be an OpenAPI security scheme"):
        dspy_imp.web.app(agent(), auth=signed_in, auth_scheme={"type": "password"})
    with pytest.raises(dspy_imp.ConfigurationError, match="`auth_scheme` describes what `auth` reads"):
        dspy_imp.web.app(agent(), auth_scheme=HEADER_SCHEME)
    document = _openapi.description(_openapi.checked_scheme(signed_in, HEADER_SCHEME), None, False)
    assert document["components"]["securitySchemes"]["auth"] == HEADER_SCHEME


def test_the_docs_copy_is_the_full_configurations_description(db_url: str) -> None:
    """``docs/openapi.json``: ``auth`` (read from a header), a ``DatabaseStore``, client tools. Its
    ``info.version`` is the release it was written at. ``DSPY_IMP_WRITE_OPENAPI=1`` rewrites it."""
    scheme = _openapi.checked_scheme(signed_in, HEADER_SCHEME)
    document = _openapi.description(scheme, dspy_imp.web.DatabaseStore(db_url), True)
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    if os.environ.get("DSPY_IMP_WRITE_OPENAPI"):
        DOCS_COPY.write_text(text)
    kept = json.loads(DOCS_COPY.read_text())
    kept["info"]["version"] = document["info"]["version"]
    assert kept == document, "docs/openapi.json is stale: DSPY_IMP_WRITE_OPENAPI=1 pytest tests/test_web_openapi.py"
    assert "openapi.json" in (ROOT / "docs" / "web.md").read_text()


# -- what Schemathesis found (each its input), kept fixed ---------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("TRACE", "/", "GET, HEAD"),  # was 415: the body check ran before the router
        ("PUT", "/api/info", "GET, HEAD"),
        ("POST", "/api/info", "GET, HEAD"),
        ("TRACE", "/api/conversations/0/stop", "POST"),
    ],
)
async def test_a_method_no_route_takes_is_405_with_allow(method: str, path: str, allowed: str) -> None:
    response = await get(dspy_imp.web.app(agent()), path, method=method)
    assert response.status_code == 405
    assert {m.strip() for m in response.headers["allow"].split(",")} == {m.strip() for m in allowed.split(",")}


async def test_a_post_a_route_takes_still_needs_json() -> None:
    response = await get(dspy_imp.web.app(agent()), "/ag-ui", method="POST", content=b"threadId=t1")
    assert response.status_code == 415  # what the body check is for: a form cannot drive the agent


async def test_a_conversations_path_allows_all_its_methods() -> None:
    # was `Allow: HEAD, GET`: reading and renaming/deleting were two routes on one path
    response = await get(dspy_imp.web.app(agent()), "/api/conversations/0", method="OPTIONS")
    assert response.status_code == 405
    assert {m.strip() for m in response.headers["allow"].split(",")} == {"GET", "HEAD", "PATCH", "DELETE"}


async def test_an_id_holding_a_slash_is_one_segment_and_stop_is_the_last() -> None:
    app = dspy_imp.web.app(agent())
    message = {"id": "u", "role": "user", "content": "Refund order 42"}
    for thread in ("a", "a/stop"):
        body = {"threadId": thread, "runId": "r1", "messages": [message]}
        assert (await get(app, "/ag-ui", method="POST", json=body)).status_code == 200
    # the page's request: the id's slash sent as %2F reads the conversation `a/stop`, not `a`'s stop
    read = await get(app, "/api/conversations/a%2Fstop")
    assert read.status_code == 200 and read.json()["interrupts"] == []  # `a` waits on c1; `a/stop` answered
    assert (await get(app, "/api/conversations/a")).json()["interrupts"][0]["id"] == "c1"
    # was: the stop of conversation `a` (409 here); it is a POST on `a/stop`, which takes none
    posted = await get(app, "/api/conversations/a%2Fstop", method="POST", json={})
    assert posted.status_code == 405 and "PATCH" in posted.headers["allow"]
    # Schemathesis's input: PATCH on the stop path was the rename of the conversation `0/stop`
    patched = await get(app, "/api/conversations/0/stop", method="PATCH", json={"title": "x"})
    assert patched.status_code == 405 and patched.headers["allow"] == "POST"
    stopped = await get(app, "/api/conversations/a/stop", method="POST", json={})
    assert stopped.status_code == 409  # the stop of `a`: no turn of it runs


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        # Schemathesis's input: an id with control characters (a newline among them), percent-encoded
        ("PATCH", "/api/conversations/%C2%99%292%F0%98%89%BC%1F%05R%0A%13", {"title": ""}),
        ("GET", "/api/conversations/a%0Ab", None),
        ("DELETE", "/api/conversations/a%0Ab", None),
        ("POST", "/api/conversations/a%0Ab/stop", {}),
        ("GET", "/api/conversations/a%00b", None),
    ],
)
async def test_a_path_id_with_a_control_character_is_422_naming_it(method: str, path: str, body: Any) -> None:
    # was a plain-text 404 for a newline: the path's id matched no route
    response = await get(dspy_imp.web.app(agent()), path, method=method, json=body)
    assert response.status_code == 422
    assert "`id` must be a conversation id" in response.json()["error"]


async def test_the_description_says_what_the_app_takes_and_writes() -> None:
    app = dspy_imp.web.app(agent())
    document = (await get(app, "/openapi.json")).json()
    run_input = validator(document, {"$ref": "#/components/schemas/RunAgentInput"})
    # Schemathesis's input, cut down: a content part without its `type`. Pydantic's schema let it be
    # left out (the tag has a default), its validator needs it (422): the description now says so.
    untagged = {"threadId": "t1", "runId": "r1", "messages": [{"id": "u", "role": "user", "content": [{"text": "x"}]}]}
    assert not run_input.is_valid(untagged)
    assert (await get(app, "/ag-ui", method="POST", json=untagged)).status_code == 422
    tagged = {**untagged, "messages": [{"id": "u", "role": "user", "content": [{"type": "text", "text": "x"}]}]}
    assert run_input.is_valid(tagged)
    # ids are conversation ids here too
    assert not run_input.is_valid({**tagged, "threadId": "a\nb"})
    assert not run_input.is_valid({**tagged, "threadId": ""})
    assert not run_input.is_valid({**tagged, "threadId": "x" * 501})

    # the AI SDK stream's last event is `[DONE]`, not JSON: described as such
    event = document["paths"]["/api/chat"]["post"]["responses"]["200"]["content"]["text/event-stream"]["schema"]
    data = validator(document, event["properties"]["data"])
    assert data.is_valid("[DONE]")
    part = validator(document, {"$ref": "#/components/schemas/ChatPart"})
    assert part.is_valid({"type": "finish", "finishReason": "stop", "messageMetadata": {}})
    assert not part.is_valid({"type": "finish", "finishReason": "stop", "extra": 1})  # strict, as the AI SDK's


async def test_a_newer_database_is_503_on_every_operation_that_says_so(db_url: str) -> None:
    store = dspy_imp.web.DatabaseStore(db_url)
    app = dspy_imp.web.app(agent(), store=store)
    document = (await get(app, "/openapi.json")).json()
    assert (await get(app, "/api/conversations")).status_code == 200  # creates the schema
    engine = sa.create_engine(db_url)
    with engine.begin() as c:
        c.execute(sa.text("UPDATE dspy_imp_web_schema SET version = 99"))
    engine.dispose()
    app = dspy_imp.web.app(agent(), store=dspy_imp.web.DatabaseStore(db_url))  # a new process's store
    body = {"threadId": "t1", "runId": "r1", "messages": [{"id": "u", "role": "user", "content": "hi"}]}
    requests = {
        ("/api/info", "get"): ("GET", "/api/info", None),
        ("/api/conversations", "get"): ("GET", "/api/conversations", None),
        ("/api/conversations/{id}", "get"): ("GET", "/api/conversations/t1", None),
        ("/api/conversations/{id}", "patch"): ("PATCH", "/api/conversations/t1", {"title": "x"}),
        ("/api/conversations/{id}", "delete"): ("DELETE", "/api/conversations/t1", None),
        ("/api/conversations/{id}/stop", "post"): ("POST", "/api/conversations/t1/stop", {}),
        ("/ag-ui", "post"): ("POST", "/ag-ui", body),
        ("/api/chat", "post"): ("POST", "/api/chat", {"id": "t1", "messages": [{"role": "user", "parts": []}]}),
    }
    saying = {  # /readyz's 503 is its own readiness body (it says "too new" there)
        (p, m) for p, item in document["paths"].items() for m, op in item.items() if "503" in op["responses"]
    } - {("/readyz", "get")}
    assert saying == set(requests)
    too_new = validator(document, {"$ref": "#/components/schemas/SchemaTooNew"})
    for method, path, json_body in requests.values():
        response = await get(app, path, method=method, json=json_body)
        assert response.status_code == 503, (method, path, response.text)
        too_new.validate(response.json())
        assert response.json()["schema"] == 99
