"""toolgate: what code in a toolgate session can ask of the service that runs it.

    import toolgate
    toolgate.billing()      # {'tier': 'free', 'free_remaining_this_month': 998, ...}
    toolgate.invoke_llm("openai/gpt-4o-mini", "Say hello")          # 'Hello!'
    toolgate.web_search("rust async runtime", max_results=3)        # [{'title', 'url', 'snippet', 'date'}]
    toolgate.fetch("https://example.com/")          # {'status': 200, 'text': '# Example ...', ...}
    toolgate.http("POST", "https://api.example/v1/items", json={"a": 1},
                  headers={"Authorization": "Bearer {{secret:API_KEY}}"})  # {'status', 'json', ...}
    toolgate.sql("PG_URL", "select id, name from items")  # {'columns', 'rows', 'row_count', ...}
    toolgate.secrets()                              # ['API_KEY', 'PG_URL']: names, never values

A call to the service is possible only while the session is running a call of the service
(a cell): from any thread of the session's Python, never from a bash command, a subprocess or
a thread that outlives its cell. It fails with ToolgateError (see its codes below). How the
session and the service talk is described in runtime/PROTOCOL.md ("upcalls").
"""

import json as _json
import math

__all__ = ["ToolgateError", "billing", "invoke_llm", "web_search", "fetch", "http", "sql",
           "secrets"]


class ToolgateError(Exception):
    """The service refused or could not answer a request of this session.

    code, one of:
        refused      the account's allowance is used up and its wallet is empty
        unavailable  the service could not record or answer the request: try again
        failed       the request ran and failed
        busy         too many requests at once in this call
        bad_request  the service did not understand the request
        not_in_call  no call of the service is running (a thread that outlived its cell, a
                     forked process): nothing was sent
        bad_answer   the service's answer could not be understood
    message: what happened, for a person.
    """

    def __init__(self, code, message):
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self):
        return f"{self.code}: {self.message}"


def billing() -> dict:
    """The account's billing status, as the service's read tool reports it in its "billing"
    field: {"tier", "free_remaining_this_month", "free_monthly_limit", "wallet_balance_usd",
    "paid_calls_available", "paid_call_cost_usd", "min_topup_usd", "max_topup_usd"} (amounts in
    US dollars as decimal strings).

    This costs one metered call, like the read tool's "billing" field: it takes one call of the
    free allowance, or one paid call from the wallet. Raises ToolgateError (code "refused" when
    the allowance is used up and the wallet is empty)."""
    record = _upcall({"kind": "billing"}).get("billing")
    if not isinstance(record, dict):
        raise ToolgateError("bad_answer", 'the answer to "billing" holds no billing record')
    return record


_LLM_OPTIONS = ("system", "max_tokens", "temperature", "response_format", "api_key_secret")


def invoke_llm(model: str, prompt: str, **options):
    """The answer of the language model MODEL ("provider/model", e.g. "openai/gpt-4o-mini")
    to PROMPT, as text; with stream=True, an iterator of its pieces as they come
    (for piece in invoke_llm(..., stream=True): print(piece, end="")). Options: system, max_tokens, temperature, response_format ("json" or
    a JSON Schema), api_key_secret (a vault secret's name). The key is found as for the AI
    tool: the named secret, else your secret with the provider's usual name
    (OPENAI_API_KEY, ...), else the operator's; the session never sees it.

    One metered call. Raises ToolgateError: "refused" when the allowance is used up and the
    wallet is empty, "failed" with the provider's words when the model call fails,
    "bad_request" for arguments the service does not accept."""
    if not isinstance(model, str) or not isinstance(prompt, str):
        raise TypeError("invoke_llm(model, prompt): both are strings")
    stream = options.pop("stream", False)
    unknown = sorted(set(options) - set(_LLM_OPTIONS))
    if unknown:
        raise TypeError(f"invoke_llm() got unknown options {unknown}; it takes {list(_LLM_OPTIONS)}")
    request = {"kind": "invoke_llm", "model": model, "prompt": prompt}
    request.update({k: v for k, v in options.items() if v is not None})
    if stream:
        request["stream"] = True
        return _streamed(request)
    answer = _upcall(request).get("llm")
    if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
        raise ToolgateError("bad_answer", 'the answer to "invoke_llm" holds no text')
    return answer["text"]


def _streamed(request):
    from toolgate._upcalls import upcall_stream
    answer = yield from upcall_stream(request)
    if not isinstance(answer.get("llm"), dict):
        raise ToolgateError("bad_answer", 'the answer to "invoke_llm" holds no text')


def web_search(query: str, max_results: int = 5) -> list:
    """Live web results for QUERY: a list of {"title", "url", "snippet", "date"} (date None
    where the engine gives none), best first, at most MAX_RESULTS (1 to 20). One metered call;
    raises ToolgateError as invoke_llm does."""
    if not isinstance(query, str):
        raise TypeError("web_search(query): a string")
    if isinstance(max_results, bool) or not isinstance(max_results, int):
        raise TypeError("web_search(max_results=...): an integer")
    results = _upcall({"kind": "web_search", "query": query, "max_results": max_results}).get("web_search")
    if not isinstance(results, list):
        raise ToolgateError("bad_answer", 'the answer to "web_search" holds no results')
    return results


def fetch(url: str, headers: dict = None, max_bytes: int = None) -> dict:
    """A GET of URL by the service (as the read tool's "url" field, under its rules: public
    http(s) addresses only, redirects followed and checked), not by this session's network.
    HEADERS (name to value) are sent with it; "{{secret:NAME}}" in a header value or the URL is
    replaced by that vault secret by the service, so this session never holds it. MAX_BYTES:
    most body bytes to read (default 1 MiB, at most 8 MiB).

    Returns {"status", "url" (after redirects), "content_type", "format" ("markdown" for HTML,
    "json", "text", "image": text is its base64, "binary": text summarises it), "text" (the
    body as the tool renders it), "bytes", "truncated", "headers" (the answer's, lower-case
    names), "json" (the parsed body when it is whole JSON, else None)}. A page that answers 404
    is returned with its status, not raised. Secret values are redacted from all of it.

    One metered call. Raises ToolgateError: "bad_request" for arguments the tool refuses (a bad
    header, a URL over 8 KiB: nothing is charged), "failed" when the request fails (a private
    address, a time-out), "refused" when the allowance is used up and the wallet is empty."""
    request = {"kind": "fetch", "url": _string("fetch", "url", url)}
    request.update(_sent_headers("fetch", headers))
    request.update(_count("fetch", "max_bytes", max_bytes))
    return _page(_upcall(request), "fetch")


_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def http(method: str, url: str, headers: dict = None, body: str = None, json=None,
         max_bytes: int = None) -> dict:
    """An HTTP request by the service: a GET as fetch() does it, a POST, PUT, PATCH or DELETE as
    the write tool's "http" field, under the same rules. BODY is text; JSON (any JSON value) is
    sent as the body instead, with "Content-Type: application/json" unless HEADERS set one.
    "{{secret:NAME}}" may stand in the URL, a header value or the body: the service puts the
    secret's value there, and this session never sees it.

    Returns what fetch() returns. One metered call; raises ToolgateError as fetch() does."""
    method = _string("http", "method", method).upper()
    if method not in _METHODS:
        raise ToolgateError("bad_request", f"http(method): one of {', '.join(_METHODS)}")
    request = {"kind": "http", "method": method, "url": _string("http", "url", url)}
    sent = _sent_headers("http", headers)
    if body is not None and json is not None:
        raise ToolgateError("bad_request", "http(): body or json, not both")
    if json is not None:
        try:
            body = _json.dumps(json, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ToolgateError("bad_request", f"http(json=...): not JSON: {e}") from None
        names = {name.lower() for name in sent.get("headers", {})}
        if "content-type" not in names:
            sent.setdefault("headers", {})["Content-Type"] = "application/json"
    if body is not None:
        request["body"] = _string("http", "body", body)
    request.update(sent)
    request.update(_count("http", "max_bytes", max_bytes))
    return _page(_upcall(request), "http")


def sql(database: str, query: str, params=None, write: bool = False, max_rows: int = None) -> dict:
    """QUERY on the database server DATABASE names (a vault secret holding postgres://... or
    mysql://...; the service connects, this session never holds the password), as the tools'
    "sql" field: read-only, as on the read tool (the database refuses a write), or with
    write=True as on the write tool (several ";"-separated statements, one transaction).
    PARAMS: a list of values (None, bool, int, float, str) for the placeholders ($1, $2, ... in
    PostgreSQL, ? in MySQL), bound by the server and never spliced into the SQL; with PARAMS the
    query is one statement. MAX_ROWS: most rows returned (default 1000, at most 10000).

    Returns {"database" ("postgres" or "mysql"), "columns": [{"name", "type"}], "rows": [[...]]
    (numbers and booleans as such, exact numerics, dates and binary (base64) as strings, JSON
    columns as JSON), "row_count", "truncated", "changes"}.

    A sqlite: file is not reached this way: open the session's own SQLite files with Python's
    sqlite3 module. One metered call; raises ToolgateError: "bad_request" for arguments the tool
    refuses (nothing is charged), "failed" with the database's words when the statement fails,
    "refused" when the allowance is used up and the wallet is empty."""
    request = {"kind": "sql", "database": _string("sql", "database", database),
               "query": _string("sql", "query", query)}
    if params is not None:
        request["params"] = _params(params)
    if not isinstance(write, bool):
        raise ToolgateError("bad_request", "sql(write=...): True or False")
    if write:
        request["write"] = True
    request.update(_count("sql", "max_rows", max_rows))
    table = _upcall(request).get("sql")
    if not isinstance(table, dict) or not isinstance(table.get("rows"), list):
        raise ToolgateError("bad_answer", 'the answer to "sql" holds no table')
    return table


def secrets() -> list:
    """The names of the account's vault secrets (never their values), as the read tool's
    "list_secrets" field. One metered call; raises ToolgateError as billing() does."""
    names = _upcall({"kind": "secrets"}).get("secrets")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ToolgateError("bad_answer", 'the answer to "secrets" holds no names')
    return names


def _string(function, name, value):
    if not isinstance(value, str):
        raise ToolgateError("bad_request", f"{function}({name}): a string, not {type(value).__name__}")
    return value


def _count(function, name, value):
    if value is None:
        return {}
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ToolgateError("bad_request", f"{function}({name}=...): a whole number")
    return {name: value}


def _params(params):
    """PARAMS as the request holds them: a list of JSON scalars."""
    if not isinstance(params, (list, tuple)):
        raise ToolgateError("bad_request", "sql(params=...): a list of values for the placeholders")
    for n, value in enumerate(params):
        ok = value is None or isinstance(value, (bool, str)) \
            or (isinstance(value, int) and -(1 << 63) <= value < (1 << 63)) \
            or (isinstance(value, float) and math.isfinite(value))
        if not ok:
            raise ToolgateError("bad_request", f"sql(params[{n}]): None, a bool, a 64-bit int, a "
                                               f"finite float or a str, not {type(value).__name__}")
    return list(params)


def _sent_headers(function, headers):
    """HEADERS as the request holds them: {"headers": {name: value}}, or nothing."""
    if headers is None:
        return {}
    if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        raise ToolgateError("bad_request", f"{function}(headers=...): a dict of header names to "
                                           "string values")
    return {"headers": dict(headers)} if headers else {}


def _page(value, kind):
    """The typed answer to a fetch or an http request, as the caller gets it."""
    page = value.get(kind)
    if not isinstance(page, dict) or not isinstance(page.get("text"), str) \
            or not isinstance(page.get("headers"), list):
        raise ToolgateError("bad_answer", f'the answer to "{kind}" holds no page')
    headers = {}
    for pair in page["headers"]:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise ToolgateError("bad_answer", f'the answer to "{kind}" holds a bad header')
        name, value = pair
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    page["headers"] = headers
    page["json"] = None
    if page.get("format") == "json" and not page.get("truncated"):
        try:
            page["json"] = _json.loads(page["text"])
        except ValueError:
            pass
    return page


def _upcall(request: dict) -> dict:
    """Sends REQUEST (an object tagged by "kind") to the service and waits for its answer: the
    "value" object of the answer, or ToolgateError. KeyboardInterrupt (the service's time-out or
    cancellation) interrupts the wait as usual."""
    from toolgate._upcalls import upcall      # loaded by the zygote: a look-up in sys.modules
    return upcall(request)
