"""toolgate: what code in a toolgate session can ask of the service that runs it.

    import toolgate
    toolgate.billing()      # {'tier': 'free', 'free_remaining_this_month': 998, ...}

A call to the service is possible only while the session is running a call of the service
(a cell): from any thread of the session's Python, never from a bash command, a subprocess or
a thread that outlives its cell. It fails with ToolgateError (see its codes below). How the
session and the service talk is described in runtime/PROTOCOL.md ("upcalls").
"""

__all__ = ["ToolgateError", "billing"]


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


def _upcall(request: dict) -> dict:
    """Sends REQUEST (an object tagged by "kind") to the service and waits for its answer: the
    "value" object of the answer, or ToolgateError. KeyboardInterrupt (the service's time-out or
    cancellation) interrupts the wait as usual."""
    from toolgate._upcalls import upcall      # loaded by the zygote: a look-up in sys.modules
    return upcall(request)
