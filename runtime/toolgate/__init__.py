"""toolgate: what code in a toolgate session can ask of the service that runs it.

    import toolgate
    toolgate.billing()      # {'tier': 'free', 'free_remaining_this_month': 998, ...}
    toolgate.invoke_llm("openai/gpt-4o-mini", "Say hello")          # 'Hello!'
    toolgate.web_search("rust async runtime", max_results=3)        # [{'title', 'url', 'snippet', 'date'}]

A call to the service is possible only while the session is running a call of the service
(a cell): from any thread of the session's Python, never from a bash command, a subprocess or
a thread that outlives its cell. It fails with ToolgateError (see its codes below). How the
session and the service talk is described in runtime/PROTOCOL.md ("upcalls").
"""

__all__ = ["ToolgateError", "billing", "invoke_llm", "web_search"]


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


def _upcall(request: dict) -> dict:
    """Sends REQUEST (an object tagged by "kind") to the service and waits for its answer: the
    "value" object of the answer, or ToolgateError. KeyboardInterrupt (the service's time-out or
    cancellation) interrupts the wait as usual."""
    from toolgate._upcalls import upcall      # loaded by the zygote: a look-up in sys.modules
    return upcall(request)
