"""RedisFleet: the processes using one Redis share their dependencies' load protection."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from retrysafe.clock import Clock, checked_clock
from retrysafe.fleet import scripts
from retrysafe.fleet.availability import Availability
from retrysafe.fleet.keys import FleetKeys
from retrysafe.fleet.refresher import Refresher
from retrysafe.fleet.settings import FleetSettings
from retrysafe.fleet.writer import Writer
from retrysafe.governor.fleet_link import FleetView, ProbeAnswer
from retrysafe.governor.limiter import QUEUE_FULL
from retrysafe.redact import redact_url
from retrysafe.redis_url import check_redis_url

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import PubSub
    from redis.commands.core import Script

__all__ = ["RedisFleet"]

#: Every fleet made in this process, for a child just forked to rejoin (see _rejoin).
_FLEETS: weakref.WeakSet[RedisFleet] = weakref.WeakSet()


def _rejoin_in_child() -> None:
    """In a child process just forked: each fleet its parent had joined joins again."""
    for fleet in list(_FLEETS):
        fleet._rejoin_after_fork()


if hasattr(os, "register_at_fork"):  # pragma: no branch - POSIX
    os.register_at_fork(after_in_child=_rejoin_in_child)

_PROBE_KINDS = ("closed", "open", "granted", "busy")
#: At most this many unanswered probe leases are kept to give back (each is one call's,
#: asked while Redis stopped answering; past this, a lease is left to run out).
_UNANSWERED_KEPT = 64


def _quick_handshake() -> dict[str, Any]:
    """What the call path's client needs to say no more than it must when it opens a
    connection (each step is a round trip of up to ``timeout``): not its library's name
    and version (``CLIENT SETINFO``, twice), nor, with redis-py 8, a ``HELLO`` for RESP3
    and a request for maintenance notifications; AUTH and SELECT, when the URL asks for
    them, remain."""
    import inspect

    import redis

    parameters = inspect.signature(redis.Redis.__init__).parameters
    quick: dict[str, Any] = (
        {"driver_info": None}  # (redis-py 8 deprecates the two below for it)
        if "driver_info" in parameters
        else {"lib_name": None, "lib_version": None}
    )
    if "protocol" in parameters:
        # RESP2: redis-py 8 speaks RESP3 by default, which opens every connection with a
        # HELLO, password or not (a URL's own ?protocol=3 still wins)
        quick["protocol"] = 2
    if "maint_notifications_config" in parameters:
        from redis.maint_notifications import MaintNotificationsConfig

        quick["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)
    return quick


class RedisFleet:
    """Cooldowns, pacing and a quorum circuit breaker shared by every process on one Redis.

    Pass it to a governor: ``Governor(settings, fleet=RedisFleet("redis://host:6379/0"))``;
    sync and async clients alike. Per dependency, the processes share:

    - **cooldowns**: a 429's (or 503's) Retry-After, or an announced rate-limit reset,
      learned by one process pauses every process until it ends;
    - **pacing**: ``LimiterSettings(requests_per_second=..., burst=...)`` is the rate of
      the whole fleet, each attempt reserving its slot in Redis (one script call, GCRA);
    - **a breaker opened by quorum**: see :class:`FleetSettings`; once its open period
      ends, one probe for the whole fleet, under a lease no attempt outlives.

    Budgets stay per process (see ``docs/fleet.md``). A healthy call makes no round
    trip: it reads the view a background thread keeps fresh (pub/sub, and a refresh every
    ``refresh_every`` seconds). Redis is never needed for a call to succeed: an operation
    gets ``timeout`` seconds, and when Redis fails, every call goes on with local
    protection at once, the outage is logged once, and the background thread rejoins the
    fleet when Redis answers again. Nothing raises because Redis failed. A process that
    joins or restarts reads the fleet's state; it never resets it.

    Needs the ``redis`` extra: ``pip install 'retrysafe[redis]'``.

    Args:
        url: a redis-py URL (``redis://``, ``rediss://``, ``unix://``); its password is
            never logged nor shown.
        namespace: prefix of every key and of the channel; fleets with different
            namespaces on one Redis are separate.
        settings: quorum, freshness and timeouts (:class:`FleetSettings`).
        clock: the monotonic clock the view's times are kept on (default the system's);
            give it the same clock as the governors that use the fleet.
    """

    def __init__(
        self,
        url: str,
        *,
        namespace: str = "retrysafe",
        settings: FleetSettings | None = None,
        clock: Clock | None = None,
    ) -> None:
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError as exc:
            raise ImportError(
                "RedisFleet needs the redis package: pip install 'retrysafe[redis]'"
            ) from exc
        if not isinstance(url, str) or not url:
            raise TypeError("RedisFleet(url): url must be a redis URL such as redis://host:6379/0")
        if not isinstance(namespace, str) or not namespace:
            raise ValueError("RedisFleet(namespace=...) must be a non-empty string")
        check_redis_url(url, "RedisFleet")
        self.settings = settings if settings is not None else FleetSettings()
        self._clock: Clock = checked_clock(clock)
        self.namespace = namespace
        try:
            self._where = redact_url(url)
        except httpx.InvalidURL:
            # (not chained: the parser's message quotes the part it could not read,
            # which may be the password)
            raise ValueError(
                "RedisFleet(url): the URL cannot be parsed; percent-encode special "
                "characters in the password (e.g. '#' as %23, '@' as %40, '/' as %2F)"
            ) from None
        self._keys = FleetKeys(namespace)
        no_retries = Retry(NoBackoff(), 0)
        timeout = self.settings.timeout
        background = self.settings.background_timeout
        #: The client calls use: every operation is bounded by ``timeout``, none retried,
        #: and a new connection says no more than it must (see _quick_handshake).
        self._redis: Redis = redis.Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=no_retries,
            **_quick_handshake(),
        )
        #: The refresher's own client (no call waits on it), with a longer timeout.
        self._background: Redis = redis.Redis.from_url(
            url, socket_timeout=background, socket_connect_timeout=background, retry=no_retries
        )
        self._no_script: type[Exception] = redis.exceptions.NoScriptError
        #: A reload of the scripts is queued in the writer (one at a time).
        self._reloading = False
        #: The writer has loaded the scripts once: until then, a call that finds one
        #: missing runs it by its text (see _run).
        self._loaded = threading.Event()
        self._scripts: dict[str, Script] = {
            name: self._redis.register_script(getattr(scripts, name)) for name in scripts.__all__
        }
        self.availability = Availability(self._where)
        self._views: dict[str, FleetView] = {}
        self._lock = threading.Lock()
        self._alive = 1
        self._refresher: Refresher | None = None
        self._writer: Writer | None = None
        self._pid = 0
        self._process = ""
        self._closed = False
        #: The probe outcomes not yet taken by Redis, by lease token: (dependency, the
        #: script's keys and arguments). Resent once Redis answers again (see _refresh):
        #: dropped, the lease would hold every process off the dependency until it ran
        #: out, long after the dependency recovered (trial94).
        self._probe_reports: dict[str, tuple[str, list[str], list[str]]] = {}
        #: The probe leases asked for whose answer never came (by token: the dependency).
        #: Redis may have granted one after this process stopped waiting: each is given
        #: back once Redis answers again (see _refresh), or every process would wait it
        #: out while this one, which took no answer for a grant, probed no one (trial94).
        self._unanswered_probes: dict[str, str] = {}
        _FLEETS.add(self)

    # -- what a FleetGuard reads -----------------------------------------------------------

    @property
    def clock(self) -> Clock:
        """The clock the views' times are on."""
        return self._clock

    @property
    def vote_after(self) -> int:
        return self.settings.vote_after

    @property
    def share_503_retry_after(self) -> bool:
        return self.settings.share_503_retry_after

    @property
    def quorum_rule(self) -> str:
        settings = self.settings
        return (
            f"FleetSettings(quorum={settings.quorum}, quorum_share={settings.quorum_share:g}, "
            f"vote_after={settings.vote_after})"
        )

    @property
    def process(self) -> str:
        """This process's name in the fleet (host, pid and a random part: a restarted
        process is a new member, as is a child after a fork)."""
        self._started()
        return self._process

    @property
    def up(self) -> bool:
        """Whether Redis answered last time (else calls use local protection only)."""
        return self.availability.up

    def live_processes(self) -> int:
        """Processes heard from within ``alive_for`` seconds, as last read (at least 1)."""
        return self._alive

    def view(self, dependency: str) -> FleetView:
        """The view of ``dependency``, read from Redis at once when new (a process that
        joins sees the fleet's state before its first call to it)."""
        self._started()
        view = self._views.get(dependency)
        if view is not None:
            return view
        with self._lock:
            view = self._views.get(dependency)
            if view is None:
                view = FleetView()
                self._views[dependency] = view
        self._read([dependency], self._redis)
        return view

    # -- pacing ----------------------------------------------------------------------------

    def reserve(self, dependency: str, rate: float, burst: int, max_wait: float) -> float | None:
        """Reserve the next paced slot in the fleet: seconds until it, None if no answer,
        :data:`~retrysafe.governor.limiter.QUEUE_FULL` (nothing reserved) if it would be
        more than ``max_wait`` away."""
        slot = self.reserve_slot(dependency, rate, burst, max_wait)
        return None if slot is None else slot[0]

    def reserve_slot(
        self,
        dependency: str,
        rate: float,
        burst: int,
        max_wait: float,
        *,
        beyond: float | None = None,
    ) -> tuple[float, float] | None:
        """As :meth:`reserve`, and which slot it is (for :meth:`release`). With
        ``beyond``, only a slot further than that many seconds away is reserved; for a
        sooner one, ``(0.0, 0.0)``, nothing reserved. (Looked at and reserved in one
        script: reserved and given back, a slot another process queued behind meanwhile
        would stay a gap.)"""
        pace = self._keys.of(dependency)[0]
        args: list[object] = [repr(1000.0 / rate), burst, repr(max_wait * 1000.0)]
        if beyond is not None:
            args.append(repr(beyond * 1000.0))
        reply = self._run("PACE", [pace], args)
        if reply is None:
            return None
        micros, name = int(reply[0]), reply[1]
        if micros == -2:
            return 0.0, 0.0
        if micros < 0:
            return QUEUE_FULL, 0.0
        return micros / 1_000_000, float(name)

    def release(self, dependency: str, rate: float, slot: float | None = None) -> bool:
        """Give a reserved slot back (sent in the background); False if Redis is away.
        The last slot of the schedule goes back, and with it the gaps left before it by
        slots given back from the middle (see ``Limiter.release``); without ``slot``,
        whichever is last."""
        names = self._keys.of(dependency)
        name = "" if slot is None else repr(slot)
        return self._later("RELEASE_PACE", [names[0], names[5]], [repr(1000.0 / rate), name])

    # -- cooldowns -------------------------------------------------------------------------

    def share_cooldown(self, dependency: str, seconds: float) -> None:
        """Pause every process's calls to ``dependency`` for ``seconds`` from now (sent in
        the background: the time it waited to be sent is taken off)."""
        cool = self._keys.of(dependency)[1]
        ends = self._clock.monotonic() + seconds

        def write() -> None:
            left = ends - self._clock.monotonic()
            if left > 0:
                self._script(
                    "COOLDOWN", [cool], [repr(left * 1000.0), self._keys.changed, dependency]
                )

        self._submit(write)

    # -- the quorum breaker ----------------------------------------------------------------

    def vote(self, dependency: str, open_for: float, max_open_for: float) -> bool:
        """This process saw ``dependency`` fail (sent in the background); the fleet breaker
        opens on a quorum. False if Redis is away."""
        _, _, opened, _, votes, _ = self._keys.of(dependency)
        settings = self.settings
        keys = [votes, self._keys.alive, opened]
        args = [
            self.process,
            repr(settings.vote_window * 1000.0),
            repr(settings.alive_for * 1000.0),
            settings.quorum,
            repr(settings.quorum_share),
            repr(open_for * 1000.0),
            repr(max_open_for * 1000.0),
            self._keys.changed,
            dependency,
        ]

        def write() -> None:
            sent_at = self._clock.monotonic()
            open_ms = int(self._script("VOTE", keys, args)[1])
            if open_ms >= 0:  # open now (by this vote or before it): this process knows at once
                view = self.view(dependency)
                view.learn(view.cooldown_until, sent_at + open_ms / 1000.0)

        return self._submit(write)

    def retract(self, dependency: str) -> None:
        """This process's vote no longer stands (it saw a healthy call)."""
        self._later("RETRACT", [self._keys.of(dependency)[4]], [self.process])

    def acquire_probe(self, dependency: str, lease: float) -> ProbeAnswer | None:
        """Ask to be the fleet's one half-open probe, holding it for ``lease`` seconds."""
        _, _, opened, probe, _, _ = self._keys.of(dependency)
        token = f"{self.process}:{secrets.token_hex(6)}"
        reply = self._run("ACQUIRE_PROBE", [opened, probe], [token, repr(lease * 1000.0)])
        if reply is None:
            if len(self._unanswered_probes) < _UNANSWERED_KEPT:
                self._unanswered_probes[token] = dependency
            return None
        kind = _PROBE_KINDS[int(reply[0])]
        seconds = max(0, int(reply[1])) / 1000.0
        return ProbeAnswer(kind, seconds, token if kind == "granted" else "")  # type: ignore[arg-type]

    def report_probe(
        self,
        dependency: str,
        token: str,
        *,
        healthy: bool,
        open_for: float | None,
        up_to: float,
        max_open_for: float,
    ) -> bool:
        """The probe's outcome (sent in the background; a probe whose lease ran out
        changes nothing): a healthy one closes the fleet breaker; a failed one opens it
        again, for ``open_for`` (a Retry-After's) or, when None, for twice its last
        period up to ``up_to``, which this process's view learns from the reply (and
        every process from the announcement). False if Redis is away."""
        _, _, opened, probe, votes, _ = self._keys.of(dependency)
        keys = [opened, probe, votes]
        args = [
            token,
            "1" if healthy else "0",
            "-1" if open_for is None else repr(open_for * 1000.0),
            repr(up_to * 1000.0),
            repr(max_open_for * 1000.0),
            self._keys.changed,
            dependency,
        ]
        self._probe_reports[token] = (dependency, keys, args)
        return self._submit(self._probe_report(token))

    def _probe_report(self, token: str) -> Callable[[], None]:
        """The write of the probe outcome kept under ``token`` (see report_probe): once
        Redis took it, it is no longer kept."""

        def write() -> None:
            report = self._probe_reports.get(token)
            if report is None:
                return  # (taken already: this was a resend)
            dependency, keys, args = report
            sent_at = self._clock.monotonic()
            taken, open_ms = (int(part) for part in self._script("REPORT_PROBE", keys, args))
            self._probe_reports.pop(token, None)
            healthy = args[1] == "1"
            if taken and not healthy:  # (open again; not taken: the lease ran out, and
                # another process probes)
                view = self.view(dependency)
                view.learn(view.cooldown_until, sent_at + open_ms / 1000.0)

        return write

    def release_probe(self, dependency: str, token: str) -> None:
        """Give the probe back unreported (its attempt ended with no outcome)."""
        self._later("RELEASE_PROBE", [self._keys.of(dependency)[3]], [token])

    # -- talking to Redis ------------------------------------------------------------------

    def _run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """One script call within ``timeout``: one round trip; None when Redis is away or
        does not have the script (never raises)."""
        if self._closed or not self.availability.up:
            # away: no call waits on Redis until the refresher finds it again; closed:
            # nothing more goes to Redis (its clients would open new connections)
            return None
        script = self._scripts[name]
        try:
            return self._redis.evalsha(script.sha, len(keys), *keys, *args)
        except self._no_script:
            if not self._loaded.is_set():
                # A process's first calls, sent before its writer has loaded the scripts
                # (as every process starts on a Redis that never ran them): the script's
                # text goes instead, one round trip still, and Redis keeps it. Going local
                # here would pace each new process's first calls by its share alone.
                return self._eval(script, keys, args)
            # Redis restarted empty, or was flushed: the scripts go back from the writer,
            # off the call path (loading one inline would be a second and third round
            # trip), once however many calls find them missing meanwhile. This call goes
            # on with local protection.
            if not self._reloading:
                self._reloading = True
                if not self._submit(self._load_scripts):
                    self._reloading = False
            return None
        except Exception as error:  # whatever Redis or the network raised
            self._lost(error)
            return None

    def _eval(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """One script call by its text, within ``timeout``; None when Redis is away."""
        text = script.script
        assert isinstance(text, str)  # (the fleet's scripts are text: retrysafe.fleet.scripts)
        try:
            return self._redis.eval(text, len(keys), *keys, *args)
        except Exception as error:  # whatever Redis or the network raised
            self._lost(error)
            return None

    def _script(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """One script call on the background client (raises when Redis fails)."""
        return self._scripts[name](keys=keys, args=args, client=self._background)

    def _later(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> bool:
        """Hand one script call to the writer; False (nothing sent) if Redis is away."""
        return self._submit(lambda: self._script(name, keys, args))

    def _submit(self, write: Callable[[], object]) -> bool:
        if not self.availability.up:
            return False
        self._started()
        writer = self._writer
        if writer is None:  # closed
            return False
        writer.submit(write)
        return True

    def flush(self, timeout: float = 1.0) -> bool:
        """Wait (at most ``timeout`` seconds) until what this process told the fleet so
        far was sent; False if it was not done in time. For tests and shutdown."""
        writer = self._writer
        return writer is None or writer.flush(timeout)

    def _lost(self, error: BaseException) -> None:
        if self.availability.lost(error):
            for view in list(self._views.values()):
                view.forget_breaker()  # its half-open probe would need Redis: local decides

    def _read(self, dependencies: list[str], client: Redis) -> None:
        """Heartbeat and read ``dependencies``' state into their views."""
        keys = [self._keys.alive]
        for dependency in dependencies:
            names = self._keys.of(dependency)
            keys += (names[1], names[2])
        args = [self.process, repr(self.settings.alive_for * 1000.0)]
        sent_at = self._clock.monotonic()
        if client is self._redis:
            reply = self._run("REFRESH", keys, args)
            if reply is None:
                return
        else:
            reply = self._scripts["REFRESH"](keys=keys, args=args, client=client)
        self._alive = max(1, int(reply[0]))
        for index, dependency in enumerate(dependencies):
            cool_ms, open_ms = int(reply[1 + 2 * index]), int(reply[2 + 2 * index])
            cooldown_until = sent_at + cool_ms / 1000.0 if cool_ms > 0 else 0.0
            open_until = sent_at + open_ms / 1000.0 if open_ms >= 0 else None
            self._views[dependency].learn(cooldown_until, open_until)

    def _refresh(self) -> None:
        """The refresher's round: raises when Redis fails (the refresher handles it).
        Redis answering, a probe outcome it did not take is sent again."""
        self._read(list(self._views), self._background)
        for token, dependency in list(self._unanswered_probes.items()):
            self._script("RELEASE_PROBE", [self._keys.of(dependency)[3]], [token])
            self._unanswered_probes.pop(token, None)
        if self._probe_reports:
            self.availability.found()  # (it answered: the resends are not dropped as away)
            for token in list(self._probe_reports):
                self._submit(self._probe_report(token))

    def _rejoin_after_fork(self) -> None:
        """In a child just forked: the parent's threads are gone, and their locks may
        have been held as it forked. It joins as a new member on its first call (its
        heartbeat and views), not before: a child that never calls (a CPU-bound pool
        worker, a ``preexec_fn`` before an exec) counted as a member would raise the
        fleet's quorum and shrink every process's paced share (review88). So each view
        is marked not calm: the first call takes the fleet's way, which joins it (a
        child whose calls all took the healthy path never joined, and heard no
        cooldown: trial94)."""
        self._lock = threading.Lock()
        self.availability.after_fork()
        loaded, self._loaded = self._loaded.is_set(), threading.Event()
        if loaded:
            self._loaded.set()
        self._probe_reports.clear()  # (the parent's probes: the parent reports them)
        self._unanswered_probes.clear()
        for view in self._views.values():
            view.unheard()

    def _announced(self, message: str) -> bool:
        """Apply an announcement that carries its news (``cool <ms> <dependency>``); True
        when the state must be read instead (any other announcement)."""
        kind, _, rest = message.partition(" ")
        if kind != "cool":
            return True
        milliseconds, _, dependency = rest.partition(" ")
        view = self._views.get(dependency)
        if view is not None and milliseconds.isdigit():
            ends = self._clock.monotonic() + int(milliseconds) / 1000.0
            if ends > view.cooldown_until:
                view.learn(ends, view.open_until)
        return False

    def _subscribe(self) -> PubSub:
        # (through a typed name: redis-py types pubsub() from 8.2 on, not before)
        make_pubsub: Callable[..., PubSub] = self._background.pubsub
        pubsub = make_pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self._keys.changed)
        return pubsub

    def _started(self) -> None:
        """Start the refresher in this process (again after a fork: a new identity)."""
        pid = os.getpid()
        if self._pid == pid or self._closed:
            return
        with self._lock:
            if self._pid == pid:
                return
            self._process = f"{socket.gethostname()}:{pid}:{secrets.token_hex(4)}"
            refresher = Refresher(
                refresh=self._refresh,
                subscribe=self._subscribe,
                on_message=self._announced,
                availability=self.availability,
                lost=self._lost,
                every=self.settings.refresh_every,
            )
            writer = Writer(self.availability, self._lost)
            self._refresher, self._writer = refresher, writer
            self._pid = pid
        refresher.start()
        writer.start()
        # The scripts a call runs go to Redis now, from the writer: a call never loads one.
        writer.submit(self._load_scripts)

    def _load_scripts(self) -> None:
        """Load every script a call runs (in the writer; a failure is Redis away)."""
        self._reloading = False  # (cleared first: a flush during the load asks again)
        for script in self._scripts.values():
            script.sha = self._background.script_load(script.script)
        self._loaded.set()

    def close(self) -> None:
        """Stop the refresher, leave the fleet (no longer counted alive), close sockets."""
        self.flush()
        self._closed = True
        refresher, self._refresher = self._refresher, None
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.stop()
        if refresher is not None:
            refresher.stop()
        if self._pid == os.getpid() and self._process:
            with contextlib.suppress(Exception):
                self._background.zrem(self._keys.alive, self._process)
        for client in (self._redis, self._background):
            with contextlib.suppress(Exception):
                client.close()

    def __enter__(self) -> RedisFleet:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "up" if self.availability.up else "away"
        return f"RedisFleet({self._where!r}, namespace={self.namespace!r}, {state})"
