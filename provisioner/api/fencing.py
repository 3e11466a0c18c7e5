"""`NotLeader`: what a call refused by the leadership fence raises inside the controller.

Raised by the fenced AWS clients (``cloud.fencing``) in place of a mutating call, once this
replica is no longer sure it holds the leader Lease. It derives from `BaseException`, not
`Exception`, for the reason `asyncio.CancelledError` does: it ends the work in hand rather
than reporting a failure of it. The engine turns every `Exception` of an AWS call into a
`CloudError` whose kind drives a retry or a failure status; a refusal caught that way would
be retried with backoff, or written to a pool's status as a failure, by a replica that may
write nothing. Passing through those handlers, it reaches the work queue (``kube.workqueue``)
and the reaper's loop, which end the pass quietly ("stop, not leader").
"""

from __future__ import annotations

__all__ = ["NotLeader"]


class NotLeader(BaseException):
    """A mutating call refused: this replica no longer surely holds the leader Lease."""
