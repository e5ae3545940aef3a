"""What an attempt's end tells the deployment's breaker and adaptive limit: one table.

    how the attempt ended                         Result        breaker     adaptive limit
    answered                                      SUCCESS       resets      grows
    at capacity, upstream rate limit              CAPACITY      counts (1)  cut (2)
    server error, reset, malformed answer,
      the upstream's own connect/read timeout     FAILURE       counts      -
    auth / config (401, 403, 404 model)           MISCONFIGURED opens       -
    bad request, context too long                 NEUTRAL       -           -
    cut by the call's own deadline                DEADLINE      counts only if it hung (3)
    the client went away, a preempted batch call  NEUTRAL       -           -

(1) only once the limit is at its floor: above it, the error is Sluice's own concurrency
    ("congested"): the limit is cut and the call queues again, the breaker is left alone.
(2) at most once per round trip (routing/deployment_state/__init__.py).
(3) rules.cut_was_a_hang: it had 3 x the deployment's usual latency and still no answer.
    With less, the deadline (Sluice's, or the client's X-Sluice-Max-Wait) was too short:
    not the deployment's fault, and nothing counts.
A call counts once per deployment: its retries there do not count again.

Five words for how things end, each decided in one place:
    ErrorClass  what kind of error an upstream answer or transport error is
    (routing/request_path/classify.py;
                decided by classify.classify_status, upstream.transport_error_class, and the
                chain walk's reading of the body: MALFORMED)
    Failure     one upstream attempt that did not answer: its ErrorClass, status, body and
                Retry-After (routing/request_path/chain.py; made by ChainWalk when the answer is an
                error)
    Refusal     why a deployment gave no slot: breaker, concurrency, budget or deadline
                (routing/deployment_state/; decided by the backend's acquire_slot, or by the
                chain walk when a queue gave no slot in time)
    Result      how an attempt ended, for the deployment's state: its breaker and adaptive
                limit (routing/deployment_state/; decided by attempt_result below)
    Outcome     how the whole call ended, for the audit trail (core/outcomes.py; set by
                CallLog.finish in routing/request_path/proxy.py and routing/request_path/relay.py,
                from the answer or from the GatewayError that refused or ended the call)
"""

from routing.deployment_state import Result
from routing.request_path.classify import CAPACITY_LIKE, ErrorClass


def attempt_result(error_class: ErrorClass | None, *, cut: bool = False) -> Result:
    """The Result an attempt's end is released with; `cut`: the call's own deadline ended
    the wait for the answer (a timeout Sluice caused)."""
    if cut:
        return Result.DEADLINE
    if error_class is None:
        return Result.SUCCESS
    if error_class in CAPACITY_LIKE:
        return Result.CAPACITY
    if error_class is ErrorClass.AUTH_CONFIG:
        return Result.MISCONFIGURED
    if error_class in (ErrorClass.CONTEXT_LENGTH, ErrorClass.BAD_REQUEST):
        return Result.NEUTRAL
    return Result.FAILURE
