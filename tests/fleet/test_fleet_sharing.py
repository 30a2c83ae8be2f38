"""What the fleet shares, over a real Redis and real sockets to the chaos server.

Each ``RedisFleet`` is one member of the fleet as Redis sees it (its own identity, its
own heartbeat, its own vote), so several in one test process stand for several
processes; ``test_fleet_processes.py`` runs real ones.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from typing import TypedDict

import anyio
import httpx
import pytest
import redis
from fleet_servers import FleetMaker, wait_for

import retrysafe
from retrysafe.chaos import KeyedChaos
from retrysafe.fleet import FleetSettings, RedisFleet
from retrysafe.governor import (
    BreakerSettings,
    DependencyGuard,
    Governor,
    GovernorSettings,
    LimiterSettings,
)
from retrysafe.governor.fleet_guard import FleetGuard
from retrysafe.governor.limiter import QUEUE_FULL

ONE_ATTEMPT = retrysafe.RetryPolicy(attempts=1, deadline=2.0)


class _ProbeReport(TypedDict):
    healthy: bool
    open_for: float | None
    up_to: float
    max_open_for: float


#: A healthy probe's report (it closes the fleet breaker).
CLOSE = _ProbeReport(healthy=True, open_for=None, up_to=1.0, max_open_for=9.0)
#: A failed probe's report with no Retry-After: the fleet doubles its period, up to 4 s.
FAIL = _ProbeReport(healthy=False, open_for=None, up_to=4.0, max_open_for=9.0)
#: The fleet breaker opens on votes alone here: no local breaker trips before it.
VOTING = GovernorSettings(breaker=BreakerSettings(consecutive_failures=1000, open_for=30))


#: The clients a test made with client(), closed when it ends (their sockets with them).
_opened: list[retrysafe.Client] = []


@pytest.fixture(autouse=True)
def _close_the_tests_clients() -> Iterator[None]:
    yield
    while _opened:
        _opened.pop().close()


def client(
    fleet: RedisFleet,
    settings: GovernorSettings | None = None,
    policy: retrysafe.RetryPolicy = ONE_ATTEMPT,
) -> retrysafe.Client:
    made = retrysafe.Client(
        governor=Governor(settings, fleet=fleet), dependency="api", policy=policy
    )
    _opened.append(made)
    return made


def test_a_governor_without_a_fleet_keeps_its_plain_guards() -> None:
    guard = Governor().guard("api")
    assert type(guard) is DependencyGuard


def test_a_governor_with_a_fleet_wraps_each_guard(make_fleet: FleetMaker) -> None:
    guard = Governor(fleet=make_fleet()).guard("api")
    assert isinstance(guard, FleetGuard)
    assert guard.view.calm


# -- cooldowns -------------------------------------------------------------------------


def learned(fleet: RedisFleet) -> None:
    """Wait until ``fleet`` (another member) learned of a fleet cooldown or open breaker:
    the fleet's lag, a round trip or two (the calling member sends in the background)."""
    wait_for(lambda: not fleet.view("api").calm)


def test_a_429_learned_by_one_process_pauses_the_others(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    other = make_fleet()
    first, second = client(make_fleet()), client(other)
    with pytest.raises(retrysafe.RateLimited):
        first.get(chaos.url("/status/429", retry_after=2))
    learned(other)
    sent = len(chaos.log())
    started = time.monotonic()
    with pytest.raises(retrysafe.CooldownActive) as refused:
        second.get(chaos.url("/status/200"))
    assert time.monotonic() - started < 0.5  # refused at once: 2 s do not fit its deadline
    assert len(chaos.log()) == sent  # nothing was sent
    assert "across the fleet" in str(refused.value)


def test_a_caller_with_time_waits_the_fleet_cooldown_out(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    other = make_fleet()
    first = client(make_fleet())
    patient = client(other, policy=retrysafe.RetryPolicy(attempts=1, deadline=5.0))
    with pytest.raises(retrysafe.RateLimited):
        first.get(chaos.url("/status/429", retry_after=1))
    learned(other)
    started = time.monotonic()
    assert patient.get(chaos.url("/status/200")).status_code == 200
    assert time.monotonic() - started >= 0.6  # it waited for the cooldown to end


def test_a_fleet_that_shares_503s_pauses_on_their_retry_after(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    other = make_fleet(share_503_retry_after=True)
    first, second = client(make_fleet(share_503_retry_after=True)), client(other)
    with pytest.raises(retrysafe.ServerError):
        first.get(chaos.url("/status/503", retry_after=3))
    learned(other)
    with pytest.raises(retrysafe.CooldownActive):
        second.get(chaos.url("/status/200"))


def test_a_fleet_keeps_503s_to_the_call_that_got_them(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    """By default, as locally: one backend that is draining must not pause the fleet."""
    sharing = make_fleet()
    first = client(sharing)
    second = client(make_fleet())
    with pytest.raises(retrysafe.ServerError):
        first.get(chaos.url("/status/503", retry_after=3))
    assert sharing.flush()
    time.sleep(0.15)  # more than the fleet's lag
    assert second.get(chaos.url("/status/200")).status_code == 200


# -- pacing ----------------------------------------------------------------------------


def test_pacing_is_a_gcra_schedule_in_redis(make_fleet: FleetMaker) -> None:
    one, other = make_fleet(), make_fleet()
    # Each slot's place in time is when it was asked for plus the wait it got; Redis's
    # clock reads between our readings before and after the ask (a loaded machine can
    # hold a process up between asks, which shortens the wait, not the schedule).
    asks: list[tuple[float, float, float | None]] = []

    def reserve(fleet: RedisFleet) -> None:
        before = time.monotonic()
        wait = fleet.reserve("paced", 10.0, 3, 60.0)
        asks.append((before, time.monotonic(), wait))

    for fleet in (one, other, one, other, one):
        reserve(fleet)
    waits = [wait for _, _, wait in asks]
    assert all(wait is not None for wait in waits)
    # A burst of three at once, then one slot every 0.1 s from the burst, whoever asks.
    assert waits[:3] == [0.0, 0.0, 0.0]

    def slot_after_burst(ask: tuple[float, float, float | None]) -> tuple[float, float]:
        before, after, wait = ask
        assert wait is not None
        return before + wait - asks[0][1], after + wait - asks[0][0]

    for index, expected in ((3, 0.1), (4, 0.2)):
        earliest, latest = slot_after_burst(asks[index])
        assert earliest - 0.03 <= expected <= latest + 0.03, (index, earliest, latest)
    assert one.release("paced", 10.0)  # the last slot goes back: the next one is nearer
    assert one.flush()
    reserve(other)
    earliest, latest = slot_after_burst(asks[-1])
    assert earliest - 0.03 <= 0.2 <= latest + 0.03, (earliest, latest)


def test_a_slot_beyond_the_longest_wait_is_not_reserved(make_fleet: FleetMaker) -> None:
    fleet = make_fleet()
    started = time.monotonic()
    assert fleet.reserve("far", 1.0, 1, 0.5) == 0.0
    # Refused (the next slot is 1 s after the first, past the longest wait of 0.5 s): the
    # queue is full, and nothing is queued, however often it is asked.
    for _ in range(3):
        assert fleet.reserve("far", 1.0, 1, 0.5) == QUEUE_FULL
    # Nothing was queued: the slot after the first is still the one 1 s after it.
    time.sleep(0.55)
    wait = fleet.reserve("far", 1.0, 1, 0.5)
    assert wait is not None
    assert 1.0 - (time.monotonic() - started) - 0.02 <= wait <= 1.0 - 0.55 + 0.02


def test_only_the_last_slot_of_the_fleets_schedule_is_given_back(make_fleet: FleetMaker) -> None:
    # A slot given back from the middle would put the next caller on the last one's slot.
    fleet = make_fleet()
    started = time.monotonic()
    slots = [fleet.reserve_slot("gaps", 10.0, 1, 60.0) for _ in range(3)]
    assert all(slot is not None for slot in slots)
    middle = slots[1]
    assert middle is not None
    assert fleet.release("gaps", 10.0, middle[1])
    assert fleet.flush()
    after = fleet.reserve_slot("gaps", 10.0, 1, 60.0)
    assert after is not None
    elapsed = time.monotonic() - started
    assert 0.3 - elapsed - 0.03 <= after[0] <= 0.3 + 0.03  # after the last slot, not on it
    assert fleet.release("gaps", 10.0, after[1])  # the last one: it goes back
    assert fleet.flush()
    again = fleet.reserve_slot("gaps", 10.0, 1, 60.0)
    assert again is not None
    assert again[1] == pytest.approx(after[1])


def test_gaps_go_back_once_every_slot_behind_them_has(make_fleet: FleetMaker) -> None:
    """Callers cancelled together give up first to last: each but the last leaves a gap,
    and the last one takes them all back, so the next caller does not wait for them."""
    fleet = make_fleet()
    started = time.monotonic()
    slots = [fleet.reserve_slot("together", 10.0, 1, 60.0) for _ in range(5)]
    names = [slot[1] for slot in slots if slot is not None]
    assert len(names) == 5
    for name in names[1:]:  # first to last: every one but the last leaves a gap
        assert fleet.release("together", 10.0, name)
    assert fleet.flush()
    after = fleet.reserve_slot("together", 10.0, 1, 60.0)
    assert after is not None
    elapsed = time.monotonic() - started
    # right after the first slot (0.1 s from the start), not after the fifth (0.5 s)
    assert 0.1 - elapsed - 0.03 <= after[0] <= 0.1 + 0.03, after


def test_a_gap_behind_a_slot_still_in_use_stays_a_gap(make_fleet: FleetMaker) -> None:
    fleet = make_fleet()
    started = time.monotonic()
    slots = [fleet.reserve_slot("held", 10.0, 1, 60.0) for _ in range(4)]
    names = [slot[1] for slot in slots if slot is not None]
    assert fleet.release("held", 10.0, names[1])  # a gap: the slot at 0.2 s waits behind it
    assert fleet.release("held", 10.0, names[3])  # the last goes back; 0.2 s is now last
    assert fleet.flush()
    after = fleet.reserve_slot("held", 10.0, 1, 60.0)
    assert after is not None
    elapsed = time.monotonic() - started
    assert 0.3 - elapsed - 0.03 <= after[0] <= 0.3 + 0.03, "after 0.2 s, never on it"


def test_a_retrys_slot_is_reserved_only_beyond_its_wait_in_one_script(
    make_fleet: FleetMaker,
) -> None:
    """A retry holds a paced slot from its grant only when the slot lies beyond its
    wait. The fleet used to reserve one and give it back when it came sooner, and a
    process queuing in between was left behind a gap (review73); the script now looks
    and reserves at once."""
    fleet = make_fleet()
    started = time.monotonic()
    first = fleet.reserve_slot("beyond", 10.0, 1, 60.0)  # now; the next is 0.1 s away
    assert first is not None
    assert fleet.reserve_slot("beyond", 10.0, 1, 60.0, beyond=5.0) == (0.0, 0.0)
    # Nothing was reserved: the next slot is still the one 0.1 s from the start.
    within = fleet.reserve_slot("beyond", 10.0, 1, 60.0)
    assert within is not None
    elapsed = time.monotonic() - started
    assert 0.1 - elapsed - 0.03 <= within[0] <= 0.1 + 0.03, within
    # A slot further than the wait is reserved, as without ``beyond``.
    held = fleet.reserve_slot("beyond", 10.0, 1, 60.0, beyond=0.05)
    assert held is not None
    assert held[0] > 0.05
    assert held[1] > 0


def test_the_fleets_half_open_probe_is_paced_like_any_attempt(make_fleet: FleetMaker) -> None:
    # 10/s, burst 1: the probe takes a paced slot, so the call after it waits its turn.
    settings = GovernorSettings(
        budget=None,
        breaker=BreakerSettings(consecutive_failures=1, open_for=0.5, max_open_for=5),
        limiter=LimiterSettings(requests_per_second=10, burst=1, max_cooldown=2),
    )
    sent: list[float] = []
    failing = [True]

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(time.monotonic())
        return httpx.Response(500 if failing[0] else 200)

    members = [make_fleet(quorum=2, vote_after=1) for _ in range(2)]
    clients = [
        retrysafe.Client(
            transport=httpx.MockTransport(handler),
            governor=Governor(settings, fleet=member),
            dependency="api",
            policy=retrysafe.RetryPolicy(attempts=1, deadline=3, min_attempt_time=0.01),
        )
        for member in members
    ]
    for each in clients:
        with pytest.raises(retrysafe.ServerError):
            each.get("http://api.test/")
    for member in members:
        assert member.flush()
    wait_for(lambda: members[0].view("api").open_until is not None)
    time.sleep(0.6)  # the fleet breaker's open period is over: half-open
    failing[0] = False
    sent.clear()
    for _ in range(3):
        assert clients[0].get("http://api.test/").status_code == 200
    gaps = [later - earlier for earlier, later in itertools.pairwise(sent)]
    assert min(gaps) >= 0.05, gaps  # slots 0.1 s apart: half that, for a busy machine
    for each in clients:
        each.close()


def test_callers_beyond_the_fleets_queue_fail_at_once_instead_of_sending_together(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    # 5/s for the whole fleet, a queue at most 0.4 s deep: three slots (0, 0.2, 0.4 s).
    settings = GovernorSettings(
        budget=None,
        breaker=None,
        limiter=LimiterSettings(requests_per_second=5, burst=1, max_cooldown=0.4),
    )
    policy = retrysafe.RetryPolicy(attempts=1, deadline=5.0)
    members = [client(make_fleet(timeout=0.2), settings, policy) for _ in range(2)]
    url = chaos.url("/status/200")
    for member in members:
        member.get(url)  # each process has seen the dependency
    time.sleep(0.6)  # the two warm-up slots are past, and the burst token is back
    lock = threading.Lock()
    sent: list[float] = []
    refused: list[retrysafe.ApiError] = []
    start = threading.Barrier(8)

    def call(member: retrysafe.Client) -> None:
        start.wait()
        try:
            member.get(url)
        except retrysafe.ApiError as error:
            with lock:
                refused.append(error)
        else:
            with lock:
                sent.append(time.monotonic())

    threads = [threading.Thread(target=call, args=(members[i % 2],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    # Three slots for eight callers arriving together; a busy machine that starts the
    # last of them more than a slot (0.2 s) after the first has freed a fourth by then.
    assert len(sent) in (3, 4), sent
    assert len(refused) == 8 - len(sent)
    for error in refused:
        assert isinstance(error, retrysafe.PacingDelayed), error
        assert error.attempts == 0
        assert "fleet's pacing queue is full" in str(error)
    # Measured where they arrive, not where their replies came back: a busy machine can
    # hold a reply back long enough that two paced calls finish together. Slots are
    # 0.2 s apart; calls sent together would arrive within a few milliseconds.
    arrivals = [record.time for record in chaos.log()[2:]]  # after the two warm-ups
    assert len(arrivals) == len(sent), arrivals
    gaps = [later - earlier for earlier, later in itertools.pairwise(sorted(arrivals))]
    assert min(gaps) >= 0.1, gaps


def test_processes_sharing_a_pace_stay_under_the_servers_limit(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    # The server allows 20/s (burst 4); the fleet paces 16/s in all, over three members.
    # (A burst of 2 left no room for a thread the machine ran late, sending on its slot
    # just before the next one's: 2 of 24 came back 429 once, in a full run on 2 cores.
    # Unpaced, three members would send 48/s, far past the burst.)
    settings = GovernorSettings(limiter=LimiterSettings(requests_per_second=16, burst=1))
    policy = retrysafe.RetryPolicy(attempts=1, deadline=10.0)
    # (A generous timeout: this is about the schedule, not about a Redis slow to answer.)
    members = [make_fleet(timeout=0.2) for _ in range(3)]
    clients = [client(member, settings, policy) for member in members]
    url = chaos.url("/rate-limit/shared", rps=20, burst=4)
    statuses: list[int] = []

    def run(member: retrysafe.Client) -> None:
        for _ in range(8):
            try:
                statuses.append(member.get(url).status_code)
            except retrysafe.RateLimited:
                statuses.append(429)

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(member,)) for member in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    assert [member.availability.outages for member in members] == [0, 0, 0]
    assert statuses.count(429) == 0
    assert len(statuses) == 24
    assert elapsed >= 23 / 16 * 0.9  # 24 calls at 16/s in all, not 16/s each


# -- the quorum breaker ----------------------------------------------------------------


def test_one_process_failing_alone_does_not_open_the_fleet_breaker(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    bad, good = make_fleet(), make_fleet()
    broken = client(bad, VOTING)
    healthy = client(good, VOTING)
    refused_url = chaos.server.closed_port_url()
    for _ in range(12):  # more than twice vote_after: it votes, and votes again
        with pytest.raises(retrysafe.TransportError):
            broken.get(refused_url)
    time.sleep(0.2)  # more than a refresh period
    assert good.view("api").calm
    assert bad.view("api").calm
    assert healthy.get(chaos.url("/status/200")).status_code == 200


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_vote_needs_failing_calls_in_a_row_and_a_healthy_call_withdraws_it(
    make_fleet: FleetMaker, chaos: KeyedChaos, redis_url: str, namespace: str, mode: str
) -> None:
    # Through the real shells: a first-try success takes their short path.
    fleet = make_fleet(vote_after=3)
    governor = Governor(VOTING, fleet=fleet)
    failing, healthy = chaos.url("/status/500"), chaos.url("/status/200")

    def calls(urls: list[str]) -> None:
        async def run_async() -> None:
            async with retrysafe.AsyncClient(
                governor=governor, dependency="api", policy=ONE_ATTEMPT
            ) as async_client:
                for url in urls:
                    with contextlib.suppress(retrysafe.ServerError):
                        await async_client.get(url)

        if mode == "async":
            anyio.run(run_async)
            return
        with retrysafe.Client(governor=governor, dependency="api", policy=ONE_ATTEMPT) as c:
            for url in urls:
                with contextlib.suppress(retrysafe.ServerError):
                    c.get(url)

    votes = f"{namespace}:votes:api"
    admin = redis.Redis.from_url(redis_url)
    calls([failing, healthy, failing, healthy, failing, healthy])  # never 3 in a row
    assert fleet.flush()
    assert admin.zcard(votes) == 0
    calls([failing, failing, failing])
    assert fleet.flush()
    assert admin.zcard(votes) == 1
    calls([healthy])
    assert fleet.flush()
    assert admin.zcard(votes) == 0


def test_a_quorum_of_processes_opens_it_for_every_process(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    members = [make_fleet(vote_after=5) for _ in range(4)]
    clients = [client(member, VOTING) for member in members]
    failing = chaos.url("/status/500")
    for _ in range(5):  # the first member votes: one of the two votes four members need
        with pytest.raises(retrysafe.ServerError):
            clients[0].get(failing)
    time.sleep(0.15)
    assert clients[3].get(chaos.url("/status/200")).status_code == 200
    for _ in range(5):  # the second one votes too
        with pytest.raises(retrysafe.ServerError):
            clients[1].get(failing)
    wait_for(lambda: not members[3].view("api").calm)
    sent = len(chaos.log())
    with pytest.raises(retrysafe.CircuitOpen) as refused:
        clients[3].get(chaos.url("/status/200"))
    assert len(chaos.log()) == sent
    assert "fleet's circuit breaker is open" in str(refused.value)


def test_by_default_the_fleet_is_no_quicker_to_open_than_a_local_breaker(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    """Runs of five failures in two members (what a merely flaky dependency gives many
    concurrent calls) are no vote: a member votes on the evidence that would open its
    own breaker by default."""
    assert FleetSettings().vote_after == BreakerSettings().consecutive_failures
    members = [make_fleet() for _ in range(4)]
    clients = [client(member, VOTING) for member in members]
    for voter in clients[:2]:
        for _ in range(5):
            with pytest.raises(retrysafe.ServerError):
                voter.get(chaos.url("/status/500"))
    for member in members[:2]:
        assert member.flush()
    time.sleep(0.15)  # more than the fleet's lag
    assert members[3].view("api").calm
    assert clients[3].get(chaos.url("/status/200")).status_code == 200


def test_a_process_that_joins_reads_the_open_breaker(
    make_fleet: FleetMaker, chaos: KeyedChaos, redis_url: str, namespace: str
) -> None:
    voting = [make_fleet(vote_after=5) for _ in range(2)]
    for member in voting:
        voter = client(member, VOTING)
        for _ in range(5):
            with pytest.raises(retrysafe.ServerError):
                voter.get(chaos.url("/status/500"))
        assert member.flush()
    newcomer = client(make_fleet(), VOTING)  # joins now: its first call knows already
    with pytest.raises(retrysafe.CircuitOpen):
        newcomer.get(chaos.url("/status/200"))
    # Joining changed nothing in Redis: the breaker is still open there.
    assert redis.Redis.from_url(redis_url).exists(f"{namespace}:open:api") == 1


def test_one_probe_for_the_whole_fleet_under_a_lease(make_fleet: FleetMaker) -> None:
    one, two = make_fleet(), make_fleet()
    members = [one, two, make_fleet()]
    for member in members[:2]:
        assert member.vote("dep", 0.1, 300.0)  # handed to the writer
        assert member.flush()
    time.sleep(0.15)  # the open period ends: half-open
    granted = one.acquire_probe("dep", lease=0.3)
    assert granted is not None
    assert granted.kind == "granted"
    busy = two.acquire_probe("dep", lease=0.3)
    assert busy is not None
    assert busy.kind == "busy"
    assert 0.1 < busy.seconds <= 0.3
    time.sleep(0.35)  # the lease ran out: the first probe is lost, another may probe
    second = two.acquire_probe("dep", lease=0.3)
    assert second is not None
    assert second.kind == "granted"
    # The lost probe's late report changes nothing; the live one closes the breaker.
    assert one.report_probe("dep", granted.token, **CLOSE)
    assert one.flush()
    still = members[2].acquire_probe("dep", lease=0.3)
    assert still is not None
    assert still.kind == "busy"
    assert two.report_probe("dep", second.token, **CLOSE)
    assert two.flush()
    closed = one.acquire_probe("dep", lease=0.3)
    assert closed is not None
    assert closed.kind == "closed"


def _probe_when_half_open(member: RedisFleet, dependency: str) -> str:
    """Wait (bounded) for the fleet breaker's open period to end, then take the probe:
    its lease token. An answer Redis did not give within the member's call-path timeout
    (None: 5 ms in one test, missed once under CI's load) is asked again."""
    tokens: list[str] = []

    def granted() -> bool:
        answer = member.acquire_probe(dependency, lease=1.0)
        if answer is not None and answer.kind == "granted":
            tokens.append(answer.token)
        return bool(tokens)

    wait_for(granted, 3.0)
    return tokens[0]


def _fail_probe(member: RedisFleet, report: _ProbeReport) -> float:
    """Take the half-open probe, report it failed, and wait for the fleet's reply: the
    period the fleet breaker opened for again, as this member's view learned it (s)."""
    token = _probe_when_half_open(member, "dep")
    reported_at = member.clock.monotonic()
    assert member.report_probe("dep", token, **report)
    assert member.flush()
    open_until = member.view("dep").open_until
    assert open_until is not None
    return open_until - reported_at


def test_each_failed_fleet_probe_doubles_the_open_period_up_to_open_for(
    make_fleet: FleetMaker, redis_url: str, namespace: str
) -> None:
    one, two = make_fleet(), make_fleet()
    for member in (one, two):
        assert member.vote("dep", 0.05, 300.0)  # the quorum's period: 50 ms
        assert member.flush()
    fail = _ProbeReport(healthy=False, open_for=None, up_to=0.5, max_open_for=9.0)
    stored: list[str | None] = []
    fleet_state = redis.Redis.from_url(redis_url, decode_responses=True)
    for _ in range(4):
        _fail_probe(one, fail)
        stored.append(fleet_state.hget(f"{namespace}:open:dep", "period"))
    fleet_state.close()
    assert stored == ["100", "200", "400", "500"]  # as a local breaker's: doubled, up to open_for
    # Every process sees the period the fleet set, not only the one that probed.
    answer = two.acquire_probe("dep", lease=1.0)
    assert answer is not None
    assert answer.kind == "open"
    assert 0.0 < answer.seconds <= 0.5


def test_the_prober_learns_the_fleets_period_from_the_reply(make_fleet: FleetMaker) -> None:
    one, two = make_fleet(), make_fleet()
    for member in (one, two):
        assert member.vote("dep", 0.05, 300.0)
        assert member.flush()
    fail = _ProbeReport(healthy=False, open_for=None, up_to=3.0, max_open_for=9.0)
    # (before the reply, its view held calls for up_to, the longest the doubling may reach)
    assert _fail_probe(one, fail) == pytest.approx(0.1, abs=0.04)


def test_a_failed_probe_reported_while_redis_is_briefly_slow_still_lands(
    make_fleet: FleetMaker, redis_url: str, namespace: str
) -> None:
    # The call path's timeout (5 ms by default) is no bound for a probe's report: it goes
    # with the writer (its background_timeout), as it did before the fleet doubled its
    # periods. Sent on the call path, it was lost, the fleet marked away, and every other
    # process told "busy" for the rest of the probe's lease.
    one, two = make_fleet(timeout=0.005), make_fleet(timeout=0.005)
    for member in (one, two):
        assert member.vote("dep", 0.05, 300.0)
        assert member.flush()
    token = _probe_when_half_open(one, "dep")
    admin = redis.Redis.from_url(redis_url, decode_responses=True)
    admin.execute_command("CLIENT", "PAUSE", 40, "WRITE")
    fail = _ProbeReport(healthy=False, open_for=None, up_to=5.0, max_open_for=9.0)
    assert one.report_probe("dep", token, **fail)
    assert one.flush()
    assert one.up
    assert admin.hget(f"{namespace}:open:dep", "period") == "100"
    assert admin.exists(f"{namespace}:probe:dep") == 0  # the lease went with the report
    admin.close()


def test_a_503s_retry_after_sets_the_fleets_period_and_doubling_goes_on_from_it(
    make_fleet: FleetMaker,
) -> None:
    one, two = make_fleet(), make_fleet()
    for member in (one, two):
        assert member.vote("dep", 0.05, 300.0)
        assert member.flush()
    hinted = _ProbeReport(healthy=False, open_for=0.15, up_to=0.5, max_open_for=9.0)
    assert _fail_probe(one, hinted) == pytest.approx(0.15, abs=0.04)
    doubled = _ProbeReport(healthy=False, open_for=None, up_to=0.5, max_open_for=9.0)
    assert _fail_probe(one, doubled) == pytest.approx(0.3, abs=0.04)
    # A probe that succeeds closes it; the next opening starts from the voters' period.
    assert one.report_probe("dep", _probe_when_half_open(one, "dep"), **CLOSE)
    assert one.flush()
    for member in (one, two):
        assert member.vote("dep", 0.05, 300.0)
        assert member.flush()
    assert _fail_probe(one, doubled) == pytest.approx(0.1, abs=0.04)


def test_a_failed_probe_whose_lease_ran_out_changes_nothing(
    make_fleet: FleetMaker, redis_url: str, namespace: str
) -> None:
    one, two = make_fleet(), make_fleet()
    for member in (one, two):
        assert member.vote("dep", 0.05, 300.0)
        assert member.flush()
    token = _probe_when_half_open(one, "dep")
    one.release_probe("dep", token)
    assert one.flush()
    assert one.report_probe("dep", token, **FAIL)  # handed over; the fleet takes it not
    assert one.flush()
    fleet_state = redis.Redis.from_url(redis_url, decode_responses=True)
    assert fleet_state.hget(f"{namespace}:open:dep", "period") == "50"
    fleet_state.close()
    answer = two.acquire_probe("dep", lease=1.0)
    assert answer is not None
    assert answer.kind == "granted"


def test_a_half_open_fleet_sends_one_probe_and_closes_for_all(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    settings = GovernorSettings(breaker=BreakerSettings(consecutive_failures=1000, open_for=0.3))
    members = [make_fleet(vote_after=5) for _ in range(3)]
    clients = [client(member, settings) for member in members]
    for voter in clients[:2]:
        for _ in range(5):
            with pytest.raises(retrysafe.ServerError):
                voter.get(chaos.url("/status/500"))
    wait_for(lambda: not members[2].view("api").calm)
    time.sleep(0.35)  # open period over: half-open
    before = len(chaos.log())
    results: list[object] = []

    def call(member: retrysafe.Client) -> None:
        try:
            results.append(member.get(chaos.url("/delay", ms=300)).status_code)
        except retrysafe.CircuitOpen as refused:
            results.append(refused)

    # The probe takes 0.3 s: the others ask while it is in flight and are refused.
    threads = [threading.Thread(target=call, args=(member,)) for member in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(200) == 1
    assert len(chaos.log()) - before == 1
    wait_for(lambda: all(member.view("api").calm for member in members))
    assert clients[2].get(chaos.url("/status/200")).status_code == 200


def test_a_client_whose_fleet_probe_fails_reopens_the_fleet_for_twice_the_period(
    make_fleet: FleetMaker, chaos: KeyedChaos, redis_url: str, namespace: str
) -> None:
    breaker = BreakerSettings(consecutive_failures=1000, open_for=2.0, first_open_for=0.1)
    settings = GovernorSettings(breaker=breaker)
    members = [make_fleet(vote_after=5) for _ in range(2)]
    clients = [client(member, settings) for member in members]
    for voter in clients:
        for _ in range(5):
            with pytest.raises(retrysafe.ServerError):
                voter.get(chaos.url("/status/500"))
    opened = redis.Redis.from_url(redis_url, decode_responses=True)
    key = f"{namespace}:open:api"
    # The voters' local breakers stay closed: the fleet opens for their first period.
    wait_for(lambda: opened.hget(key, "period") == "100")
    time.sleep(0.15)  # half-open: the next call is the fleet's one probe
    with pytest.raises(retrysafe.ServerError):
        clients[0].get(chaos.url("/status/500"))
    assert members[0].view("api").open_until is not None  # held here at once
    assert members[0].flush()  # (the report goes in the background)
    assert opened.hget(key, "period") == "200"
    opened.close()


# -- Redis away ------------------------------------------------------------------------


def test_with_redis_refusing_calls_go_on_locally_and_it_is_logged_once(
    make_fleet: FleetMaker, chaos: KeyedChaos, caplog: pytest.LogCaptureFixture
) -> None:
    closed = chaos.server.closed_port_url().rstrip("/").replace("http://", "")
    fleet = make_fleet(f"redis://:hunter2-secret@{closed}/0", timeout=0.005)
    settings = GovernorSettings(limiter=LimiterSettings(requests_per_second=200, burst=5))
    paced = client(fleet, settings)
    with caplog.at_level("DEBUG", logger="retrysafe.fleet"):
        for _ in range(10):
            started = time.monotonic()
            assert paced.get(chaos.url("/status/200")).status_code == 200
            assert time.monotonic() - started < 0.5
    assert not fleet.up
    warnings = [r for r in caplog.records if r.name == "retrysafe.fleet" and r.levelno >= 30]
    assert len(warnings) == 1
    assert "hunter2-secret" not in caplog.text
    assert "[REDACTED]" in warnings[0].getMessage()
    assert "hunter2-secret" not in repr(fleet)


def test_a_redis_that_never_answers_costs_a_call_at_most_its_timeout(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    silent = chaos.server.fault_url("accept_never_read").rstrip("/").replace("http://", "")
    fleet = make_fleet(f"redis://{silent}/0", timeout=0.005)
    settings = GovernorSettings(limiter=LimiterSettings(requests_per_second=500, burst=5))
    paced = client(fleet, settings)
    paced.get(chaos.url("/status/200"))  # the first call may find it out
    durations = []
    for _ in range(10):
        started = time.monotonic()
        assert paced.get(chaos.url("/status/200")).status_code == 200
        durations.append(time.monotonic() - started)
    assert not fleet.up
    assert max(durations) < 0.25  # no call waits on a Redis known to be away


@pytest.mark.anyio
async def test_an_async_client_is_not_held_up_by_a_silent_redis(
    make_fleet: FleetMaker, chaos: KeyedChaos
) -> None:
    silent = chaos.server.fault_url("accept_never_read").rstrip("/").replace("http://", "")
    fleet = make_fleet(f"redis://{silent}/0", timeout=0.005)
    settings = GovernorSettings(limiter=LimiterSettings(requests_per_second=500, burst=5))
    gaps: list[float] = []
    done = anyio.Event()

    async def tick() -> None:
        last = time.monotonic()
        while not done.is_set():
            await anyio.sleep(0.001)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    governor = Governor(settings, fleet=fleet)
    async with (
        retrysafe.AsyncClient(governor=governor, dependency="api", policy=ONE_ATTEMPT) as c,
        anyio.create_task_group() as group,
    ):
        group.start_soon(tick)
        for _ in range(10):
            assert (await c.get(chaos.url("/status/200"))).status_code == 200
        done.set()
    assert gaps
    # The loop kept turning: never held for the refresher's 0.25 s timeout, only ever for
    # the calls' 5 ms one (a loaded machine may pause any process for tens of ms).
    assert max(gaps) < 0.2


@pytest.mark.anyio
async def test_an_async_client_shares_a_cooldown(make_fleet: FleetMaker, chaos: KeyedChaos) -> None:
    other = make_fleet()
    first = Governor(fleet=make_fleet())
    second = Governor(fleet=other)
    async with retrysafe.AsyncClient(governor=first, dependency="api", policy=ONE_ATTEMPT) as a:
        with pytest.raises(retrysafe.RateLimited):
            await a.get(chaos.url("/status/429", retry_after=2))
    deadline = time.monotonic() + 3
    while other.view("api").calm:  # the fleet's lag
        assert time.monotonic() < deadline
        await anyio.sleep(0.01)
    async with retrysafe.AsyncClient(governor=second, dependency="api", policy=ONE_ATTEMPT) as b:
        with pytest.raises(retrysafe.CooldownActive):
            await b.get(chaos.url("/status/200"))


def test_evicted_keys_and_scripts_are_only_state_lost(
    make_fleet: FleetMaker, chaos: KeyedChaos, redis_url: str
) -> None:
    fleet, other = make_fleet(), make_fleet()
    first, second = client(fleet), client(other)
    with pytest.raises(retrysafe.RateLimited):
        first.get(chaos.url("/status/429", retry_after=5))
    other.reserve("warm", 10.0, 1, 60.0)  # (its background has loaded the scripts too)
    assert fleet.flush()
    assert other.flush()
    admin = redis.Redis.from_url(redis_url)
    admin.script_flush()
    admin.flushall()  # every key and script gone, as under eviction or a wipe
    wait_for(lambda: fleet.view("api").calm)  # the cooldown went with its key
    # The call that finds a script gone goes on locally (no answer), without loading it
    # itself: one round trip, never three. The scripts go back from the background.
    assert fleet.reserve("after-flush", 10.0, 1, 60.0) is None
    assert second.get(chaos.url("/status/200")).status_code == 200
    assert fleet.flush()
    assert fleet.reserve("after-flush", 10.0, 1, 60.0) == 0.0
    assert fleet.up  # (a missing script is not Redis away)


def test_a_call_on_a_new_connection_makes_no_round_trip_it_can_do_without(
    make_fleet: FleetMaker, redis_url: str
) -> None:
    """Each round trip may take up to FleetSettings.timeout: a call's own Redis work is
    the script call, and, on a connection it must open, no more than the handshake the
    URL asks for (no CLIENT SETINFO, no maintenance notifications, no script loading)."""
    fleet = make_fleet()
    fleet.reserve("warm", 10.0, 1, 60.0)  # (starts the background, which loads the scripts)
    assert fleet.flush()
    admin = redis.Redis.from_url(redis_url)
    fleet._redis.connection_pool.disconnect()  # the next call opens a connection
    admin.config_resetstat()
    assert fleet.reserve("fresh-connection", 10.0, 1, 60.0) == 0.0
    counted = {name: stats["calls"] for name, stats in admin.info("commandstats").items()}
    # (the script's own commands are counted too: only what a client sends is looked at)
    assert counted["cmdstat_evalsha"] == 1
    # No password and no database in this URL: no HELLO (RESP3), AUTH or SELECT either.
    assert "@" not in redis_url
    unneeded = ("cmdstat_client", "cmdstat_script", "cmdstat_hello", "cmdstat_auth")
    assert [name for name in counted if name.startswith(unneeded)] == []


def test_calls_that_find_the_scripts_gone_ask_for_one_reload_between_them(
    make_fleet: FleetMaker, redis_url: str
) -> None:
    """However many calls find the scripts missing before the writer has loaded them,
    one reload goes in the queue: the fleet's other writes do not wait behind copies."""
    fleet = make_fleet()
    fleet.reserve("warm", 10.0, 1, 60.0)
    fleet._started()  # (its background threads: the writer the reload goes to)
    assert fleet.flush()
    admin = redis.Redis.from_url(redis_url)
    admin.script_flush()
    admin.config_resetstat()
    writer = fleet._writer
    assert writer is not None
    hold = threading.Event()
    writer.submit(hold.wait)  # the writer is busy: every reload asked for now waits
    answers = [fleet.reserve(f"gone-{number}", 10.0, 1, 60.0) for number in range(20)]
    hold.set()
    assert fleet.flush()
    assert answers == [None] * 20  # each went on locally
    loads = admin.info("commandstats").get("cmdstat_script|load", {"calls": 0})["calls"]
    # One reload, each script once (the refresher may load its own script once more).
    assert len(fleet._scripts) <= loads <= len(fleet._scripts) + 1
    assert fleet.reserve("after", 10.0, 1, 60.0) == 0.0
