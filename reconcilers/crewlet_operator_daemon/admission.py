"""Which EngineClass generations the API server has admitted children for.

Before a company's first verdict, its children are applied as a server-side dry run, because the
API server may refuse a child for what only it can judge (a toleration, a storage class name),
and then the company is refused with ``InvalidClass`` and nothing half-written. What it can refuse
comes from the class, so one dry run a class generation is enough. A burst of new companies of a
class nobody has run yet (the first creates after a start) would otherwise dry-run every one
of them at once, 13 applies each, all on the verdicts' path: the first dry run is shared.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class Admissions:
    """The class generations whose children passed a dry run, and the dry run in flight for
    each: concurrent callers for one class generation wait for the first one's dry run.

    A shared dry run that the API server refused (or that was cancelled) admits nobody: each
    waiter then runs its own, so each company is refused with the message about its own
    children, as when it alone was new."""

    def __init__(self) -> None:
        self._admitted: dict[str, int | None] = {}
        # Invariant: a key is here only while its dry run runs; the future says whether it
        # passed (never an exception, so an unawaited one warns of nothing).
        self._in_flight: dict[tuple[str, int | None], asyncio.Future[bool]] = {}

    def admitted(self, class_uid: str, generation: int | None) -> bool:
        """Whether a dry run of this class generation's children has passed."""
        return class_uid in self._admitted and self._admitted[class_uid] == generation

    async def admit(
        self, class_uid: str, generation: int | None, dry_run: Callable[[], Awaitable[object]]
    ) -> None:
        """Return once this class generation is admitted: at once if it was, after the dry run
        in flight for it if that passes, else after ``dry_run`` (whose refusal is raised).
        """
        if self.admitted(class_uid, generation):
            return
        key = (class_uid, generation)
        shared = self._in_flight.get(key)
        if shared is not None:
            # Shielded: a waiter cancelled must not cancel the dry run the others wait for.
            if await asyncio.shield(shared):
                return
            await dry_run()
            self._admitted[class_uid] = generation
            return
        passed: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._in_flight[key] = passed
        try:
            await dry_run()
            self._admitted[class_uid] = generation
        finally:
            del self._in_flight[key]
            passed.set_result(self.admitted(class_uid, generation))
