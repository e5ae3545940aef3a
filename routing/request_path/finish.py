"""The last step of every call, however it ended."""

from quotas.reservation import settle_later
from routing.observability.audit import CallLog, audit_writer
from routing.observability.tracing import record


def complete(call: CallLog) -> None:
    """Settle the call's quota reservation against what it used (a refund when it failed)
    and write its audit record (and its trace, when traces are exported)."""
    if call.quota is not None:
        settle_later(call.quota, tokens=call.tokens_in + call.tokens_out, cost=float(call.cost))
    if audit_writer.record(call):  # a refusal not recorded (a flood of bad keys): no trace
        record(call)
