"""How plan jobs reach workers: procrastinate on PostgreSQL, an in-process worker on SQLite.

PostgreSQL (several replicas and `ridgeline worker` processes share the queue): a POST stores the
plan `queued` and commits, then defers a procrastinate job `run_plan(plan_id)` on the `plans`
queue, whose `lock` and `queueing_lock` are the plan id (one run of a plan at a time, one job
waiting for it at most). Procrastinate's workers (in each server process, `RIDGELINE_PLAN_WORKERS`
plans at once; in `ridgeline worker` processes, `--concurrency`) take jobs with `FOR UPDATE SKIP
LOCKED`, woken by LISTEN/NOTIFY. A job starts its plan under an owner name of its own, one per
attempt (`PlanRepository.start`), and runs it (`app.plans.jobs.PlanRunner`).

- A defer that fails (the database went away after the commit) fails the plan with a 503; the
  POST answers that problem.
- A worker that dies stops sending heartbeats (every `plan_lease_s / 3`). The `recover_plans`
  periodic job (every `plan_lease_s / 2`, one per tick across all workers) retries the jobs of
  workers silent for `plan_lease_s` (procrastinate's stalled jobs), and defers a job for any plan
  left queued or running without one, so no plan is lost. A plan started more than
  `plan_max_attempts` times fails (`PlanRunner`). It also deletes procrastinate's finished jobs
  older than a day (the plan's row is its lasting record).
- DELETE of a queued or running plan cancels its row and aborts its job: procrastinate cancels
  the running task, whose heavy-work process is ended; the progress check would stop it too.
- A worker that stops (SIGTERM, the app's shutdown) aborts the jobs running there: their plans
  go back `queued`, untried, and their jobs are retried at once, for another worker.

SQLite (one machine): a `PlanWorker` in each process claims plans from the table
(`app.plans.jobs`); a POST through this process wakes its worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

from anyio import to_thread
from procrastinate import App, BaseRetryStrategy, JobContext, PsycopgConnector, RetryDecision
from procrastinate.exceptions import AlreadyEnqueued
from procrastinate.job_context import AbortReason
from procrastinate.jobs import Job
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.orm import Session, sessionmaker

from app.catalog.invalidation import CatalogInvalidation, watch_catalog
from app.catalog.orm import utcnow
from app.catalog.spec_cache import SpecCache
from app.db.notify import listens, postgres_conninfo
from app.db.session import make_engine, make_session_factory
from app.plans import service as plans
from app.plans.jobs import Outcome, PlanRunner, PlanWorker, WorkerLimits, wait_for_plan
from app.plans.repository import PlanRow
from app.settings import Settings
from app.web.heavy import HeavyWork

__all__ = [
    "PLANS_QUEUE",
    "QUEUE_APPLICATION_NAME",
    "PlanJobs",
    "PlanQueue",
    "PlanReleased",
    "plan_jobs",
    "procrastinate_owns",
    "run_worker",
    "worker_catalog",
]

_log = logging.getLogger("ridgeline.plans")

PLANS_QUEUE = "plans"
RUN_PLAN = "ridgeline.run_plan"
QUEUE_APPLICATION_NAME = "ridgeline-plan-queue"
"""PostgreSQL `application_name` of the queue's connections."""
RECOVER_PLANS = "ridgeline.recover_plans"
FINISHED_JOBS_KEPT_H = 24
WORKER_STOP_TIMEOUT_S = 15.0
WORKER_CANCEL_INTERVAL_S = 0.5
"""How long a stopping process waits for its plan worker to hand its plans back."""


def procrastinate_owns(table_name: str) -> bool:
    """True for a table of procrastinate's schema (migration 0010 creates them from the
    library's own SQL; they are not in `Base.metadata`)."""
    return table_name.startswith("procrastinate_")


class PlanReleased(Exception):
    """A plan put back `queued`, untried: its job is to be retried in `retry_in_s`."""

    def __init__(self, plan_id: str, retry_in_s: int) -> None:
        super().__init__(f"plan {plan_id} put back in the queue")
        self.retry_in_s = retry_in_s


class _RetryReleased(BaseRetryStrategy):
    """Retry a job whose plan was put back; a job otherwise ends as it ended (a plan's own
    failure is stored in its row, and retrying it would fail the same way)."""

    def get_retry_decision(self, *, exception: BaseException, job: Job) -> RetryDecision | None:
        if isinstance(exception, PlanReleased):
            return RetryDecision(retry_in={"seconds": exception.retry_in_s})
        return None


def _cron_every(seconds: float) -> str:
    """A cron schedule (with croniter's sixth field, seconds) firing about every `seconds`."""
    whole = max(1, round(seconds))
    if whole < 60:
        return f"* * * * * */{whole}"
    return f"*/{min(59, whole // 60)} * * * *"


def _runner(context: JobContext) -> PlanRunner:
    """The runner of the worker running the job (`PlanQueue.work` puts it in the context)."""
    runner: PlanRunner = context.additional_context["runner"]
    return runner


async def _run_plan(context: JobContext, plan_id: str) -> str:
    """Procrastinate's task: start `plan_id` under an owner name of this attempt's and run it;
    the outcome (or why nothing ran) is the job's result."""
    runner = _runner(context)
    owner = f"{runner.name}:{context.job.id}.{context.job.attempts}"
    try:
        claim = await runner.start(plan_id, owner)
        if claim is None:
            return "nothing to run"
        outcome = await runner.run(claim, owner)
    except asyncio.CancelledError:
        if context.abort_reason() is AbortReason.SHUTDOWN:
            await runner.release(plan_id, owner)
            raise PlanReleased(plan_id, 0) from None
        runner.outcomes[Outcome.CANCELLED] += 1  # DELETE aborted it (the row says cancelled)
        raise
    if outcome is Outcome.RELEASED:
        raise PlanReleased(plan_id, runner.heavy.retry_after_s())
    return outcome.value


class PlanQueue:
    """The procrastinate app of plan jobs on one PostgreSQL database: `run_plan` and the
    periodic `recover_plans`, and a worker for them. Open it (`open`) before use."""

    def __init__(self, settings: Settings, limits: WorkerLimits) -> None:
        self.limits = limits
        self.pool = AsyncConnectionPool(
            postgres_conninfo(settings.database_url),
            min_size=1,
            max_size=limits.concurrency + 4,  # fetch, finish, heartbeat, abort polls, defers
            open=False,
            check=AsyncConnectionPool.check_connection,
            # Named, so an operator (and a test) tells the queue's connections from requests'.
            kwargs={"connect_timeout": 5, "application_name": QUEUE_APPLICATION_NAME},
        )
        self.app = App(connector=PsycopgConnector())
        if not _log.isEnabledFor(logging.DEBUG):
            # Procrastinate logs every job and every periodic tick at INFO (a recovery every
            # few seconds): bookkeeping. Its warnings and errors stay.
            logging.getLogger("procrastinate").setLevel(logging.WARNING)
        self.run_plan = self.app.task(
            name=RUN_PLAN, queue=PLANS_QUEUE, pass_context=True, retry=_RetryReleased()
        )(_run_plan)
        recover = self.app.task(
            name=RECOVER_PLANS,
            queue=PLANS_QUEUE,
            pass_context=True,
            priority=1,  # before any plan waiting
            queueing_lock=RECOVER_PLANS,  # one waiting at most
        )(self._recover_plans)
        self.app.periodic(cron=_cron_every(limits.lease_s / 2))(recover)

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[PlanQueue]:
        """The app open on its pool; a database that does not answer yet is retried by the
        pool in the background (defers fail meanwhile)."""
        await self.pool.open(wait=False)
        try:
            async with self.app.open_async(self.pool):
                yield self
        finally:
            await self.pool.close()

    async def defer(self, plan_id: str) -> None:
        """A job to run `plan_id` (none when one is waiting for it already)."""
        with contextlib.suppress(AlreadyEnqueued):
            await self.run_plan.configure(lock=plan_id, queueing_lock=plan_id).defer_async(
                plan_id=plan_id
            )

    async def abort(self, plan_id: str) -> None:
        """Abort the jobs of `plan_id`: one waiting never runs, one running is cancelled."""
        for job in await self.app.job_manager.list_jobs_async(lock=plan_id, queue=PLANS_QUEUE):
            if job.id is not None and job.status in ("todo", "doing"):
                await self.app.job_manager.cancel_job_by_id_async(job.id, abort=True)

    async def work(self, runner: PlanRunner) -> None:
        """Run a procrastinate worker on the plans queue until cancelled, restarting it when it
        stops on its own (it stops when its database connection fails). Cancelled, it aborts
        the jobs running here, which put their plans back in the queue."""
        limits = self.limits
        current = asyncio.current_task()
        while True:
            try:
                await self.app.run_worker_async(
                    queues=[PLANS_QUEUE],
                    name=runner.name,
                    concurrency=limits.concurrency,
                    fetch_job_polling_interval=limits.poll_s,
                    abort_job_polling_interval=limits.poll_s,
                    shutdown_graceful_timeout=0,
                    additional_context={"runner": runner},
                    install_signal_handlers=False,
                    update_heartbeat_interval=limits.lease_s / 3,
                    stalled_worker_timeout=limits.lease_s,
                )
            except Exception:
                _log.exception("plan worker %s failed; restarting it", runner.name)
            else:
                # A cancellation procrastinate's shutdown absorbed still counts: stopping is
                # final, never a restart (a restarted worker would keep the process alive).
                if current is not None and current.cancelling():
                    raise asyncio.CancelledError
                _log.warning("plan worker %s stopped; restarting it", runner.name)
            await asyncio.sleep(limits.lease_s / 3)

    async def _recover_plans(self, context: JobContext, timestamp: int) -> str:
        """Retry the plan jobs of workers silent for `lease_s` (they died), and defer a job for
        every plan queued or running without one since before `lease_s` ago."""
        manager = self.app.job_manager
        stalled = await manager.get_stalled_jobs(
            queue=PLANS_QUEUE, task_name=RUN_PLAN, seconds_since_heartbeat=self.limits.lease_s
        )
        retried = 0
        for job in stalled:
            try:
                await manager.retry_job(job)
                retried += 1
            except Exception:  # another recovery retried it first
                _log.info("stalled plan job %s was not retried", job.id, exc_info=True)
        runner = _runner(context)
        since = utcnow() - timedelta(seconds=self.limits.lease_s)
        lost = await to_thread.run_sync(runner.write, lambda r: r.unqueued(since))
        for plan_id in lost:
            await self.defer(plan_id)
        if retried or lost:
            _log.warning("plan jobs recovered: %d stalled retried, %d deferred", retried, len(lost))
        # Procrastinate's record of finished jobs (this task's own among them, one per tick)
        # is kept a day; a plan's lasting record is its row.
        await manager.delete_old_jobs(
            nb_hours=FINISHED_JOBS_KEPT_H,
            queue=PLANS_QUEUE,
            include_failed=True,
            include_cancelled=True,
            include_aborted=True,
        )
        return f"{retried} stalled retried, {len(lost)} deferred"


class PlanJobs:
    """This process's way to hand plans to workers and hear back from them: `queue` on
    PostgreSQL, `worker` on SQLite; `runner` runs plans here (None when this process runs
    none)."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        runner: PlanRunner | None,
        *,
        queue: PlanQueue | None = None,
        worker: PlanWorker | None = None,
    ) -> None:
        self.sessions = sessions
        self.runner = runner
        self.queue = queue
        self.worker = worker

    async def submit(self, plan_id: str) -> None:
        """Hand a stored, queued plan to the workers. `PlanQueueUnavailable` (the plan is
        stored failed with it) when the job queue cannot take it."""
        if self.queue is None:
            if self.worker is not None:
                self.worker.wake()
            return
        try:
            await self.queue.defer(plan_id)
        except Exception as error:
            _log.exception("plan %s: deferring its job failed", plan_id)
            refused = plans.PlanQueueUnavailable()

            def fail(session: Session) -> None:
                plans.fail_queued_plan(session, plan_id, refused)

            with contextlib.suppress(Exception):  # the database is away: recovered later
                await to_thread.run_sync(self._write, fail)
            raise refused from error

    async def cancel(self, plan_id: str) -> None:
        """Stop a plan just cancelled in its row now, not at its next progress check."""
        if self.queue is None:
            return
        try:
            await self.queue.abort(plan_id)
        except Exception:  # its progress check stops it anyway
            _log.warning("plan %s: aborting its job failed", plan_id, exc_info=True)

    async def wait(self, plan_id: str, wait_s: float) -> PlanRow | None:
        """The plan once finished, waiting at most `wait_s`; None when still to finish."""
        return await wait_for_plan(self.sessions, self.runner, plan_id, wait_s)

    def _write(self, change: Callable[[Session], object]) -> None:
        with self.sessions.begin() as session:
            change(session)


@contextlib.asynccontextmanager
async def plan_jobs(
    settings: Settings,
    sessions: sessionmaker[Session],
    cache: SpecCache,
    heavy: HeavyWork,
    limits: WorkerLimits,
) -> AsyncIterator[PlanJobs]:
    """`PlanJobs` for this process while it runs, with a worker running `limits.concurrency`
    plans at once in `heavy` (none with 0). Stopped, the worker puts the plans running here
    back in the queue."""
    runner = (
        PlanRunner(sessions, cache, heavy, settings.database_url, limits)
        if limits.concurrency > 0
        else None
    )
    if not listens(settings.database_url):  # SQLite: the in-process worker
        worker = PlanWorker(runner) if runner is not None else None
        if worker is not None:
            worker.start()
        try:
            yield PlanJobs(sessions, runner, worker=worker)
        finally:
            if worker is not None:
                await worker.stop()
        return
    async with PlanQueue(settings, limits).open() as queue:
        work = asyncio.create_task(queue.work(runner)) if runner is not None else None
        try:
            yield PlanJobs(sessions, runner, queue=queue)
        finally:
            if work is not None:
                await _stop(work)


async def _stop(work: asyncio.Task[None]) -> None:
    """Cancel the worker task until it ends, for at most `WORKER_STOP_TIMEOUT_S`.

    Once is not always enough: a cancellation that lands while procrastinate's worker is still
    starting (registering itself, taking a pooled connection) can be absorbed there, and the
    worker then runs on. Cancelled again in its main loop, it stops as documented: it aborts
    its jobs, which hand their plans back to the queue."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WORKER_STOP_TIMEOUT_S
    while not work.done() and loop.time() < deadline:
        work.cancel()
        await asyncio.wait({work}, timeout=WORKER_CANCEL_INTERVAL_S)
    if not work.done():
        _log.error("plan worker did not stop in %g s", WORKER_STOP_TIMEOUT_S)


def worker_catalog(
    sessions: sessionmaker[Session], settings: Settings
) -> tuple[CatalogInvalidation, SpecCache]:
    """A worker process's catalog specs, and what keeps them current: catalog writes made
    through the API's processes reach it as they reach every replica (NOTIFY at commit, on
    PostgreSQL, while `listening`), so a plan reads the specs and prices of now."""
    cache = SpecCache(sessions, settings.catalog_cache_ttl_s)
    return watch_catalog(sessions, settings.database_url, cache), cache


async def run_worker(settings: Settings, heavy: HeavyWork, limits: WorkerLimits) -> None:
    """`ridgeline worker`: run plans from `settings.database_url` until SIGTERM or SIGINT, then
    put the plans running here back in the queue."""
    engine = make_engine(settings.database_url)
    sessions = make_session_factory(engine)
    invalidation, cache = worker_catalog(sessions, settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        async with (
            invalidation.listening(settings.database_url),
            plan_jobs(settings, sessions, cache, heavy, limits) as jobs,
        ):
            assert jobs.runner is not None  # concurrency is at least 1
            _log.info("plan worker %s started", jobs.runner.name)
            await stop.wait()
    finally:
        heavy.close()
        engine.dispose()
    _log.info("plan worker %s stopped: %s", jobs.runner.name, jobs.runner.outcomes)
