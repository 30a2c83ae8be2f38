"""What the scenarios show, as expectations that could fail, on the virtual clock."""

from __future__ import annotations

import pytest

from retrysafe import BudgetSettings, GovernorSettings, RetryPolicy
from retrysafe.simulate import run_brownout, run_contention, run_layers, run_outage
from retrysafe.simulate.contention import ContentionSettings, engine_run, formula_run
from retrysafe.simulate.outage import OutageWindow

# -- contention -----------------------------------------------------------------------


@pytest.mark.parametrize(("clients", "run"), [(1, 0), (10, 3), (60, 1)])
def test_the_engines_full_jitter_is_the_formula_draw_for_draw(clients: int, run: int) -> None:
    """The ``full`` strategy drives retrysafe's engine; with the same random streams it
    makes exactly the writes, at exactly the times, that the full-jitter formula does."""
    settings = ContentionSettings()
    writes, seconds, gave_up = engine_run(
        settings, settings.engine_policy(), GovernorSettings.off(), clients, run
    )
    assert (writes, gave_up) == (formula_run(settings, "full", clients, run)[0], 0)
    assert seconds == pytest.approx(formula_run(settings, "full", clients, run)[1], abs=1e-12)


def test_one_client_writes_once() -> None:
    result = run_contention(clients=[1], runs=3, workers=1)
    assert {row.calls for row in result.rows} == {1.0}


def test_the_same_seed_gives_the_same_table_and_another_seed_another() -> None:
    first = run_contention(clients=[20], runs=3, seed=4, workers=1)
    again = run_contention(clients=[20], runs=3, seed=4, workers=1)
    other = run_contention(clients=[20], runs=3, seed=5, workers=1)
    assert first == again
    assert first.rows != other.rows


def test_workers_do_not_change_the_answer() -> None:
    alone = run_contention(clients=[10, 30], runs=2, workers=1)
    spread = run_contention(clients=[10, 30], runs=2, workers=2)
    assert alone == spread


def test_at_100_clients_jitter_saves_most_of_the_work_and_no_jitter_takes_far_longer() -> None:
    result = run_contention(clients=[100], runs=6, workers=1)
    calls = {row.strategy: row.calls for row in result.rows}
    time_ms = {row.strategy: row.completion_ms for row in result.rows}
    assert calls["full"] < 0.5 * calls["none"]
    assert calls["full"] < 0.6 * calls["exponential"]
    assert calls["full"] <= calls["decorrelated"]
    assert time_ms["exponential"] > 5 * max(time_ms["full"], time_ms["equal"])
    assert time_ms["equal"] > time_ms["full"]


def test_your_policy_runs_as_yours_and_may_give_up() -> None:
    result = run_contention(
        clients=[30],
        runs=2,
        strategies=["full"],
        policy=RetryPolicy(attempts=2, backoff_base=0.005, backoff_cap=0.01),
        governor=GovernorSettings.off(),
        workers=1,
    )
    yours = result.row(30, "yours")
    assert yours.gave_up > 0  # two attempts cannot seat 30 writers
    assert yours.calls <= 2 * 30
    assert result.to_json()["results"][-1]["gave_up"] == yours.gave_up


def test_contention_json_has_exactly_the_documented_shape() -> None:
    result = run_contention(clients=[10, 30], runs=1, workers=1)
    document = result.to_json()
    assert set(document) == {"scenario", "results"}
    assert document["scenario"] == "contention"
    assert [(row["clients"], row["strategy"]) for row in document["results"]] == [
        (clients, strategy)
        for clients in (10, 30)
        for strategy in ("none", "exponential", "full", "equal", "decorrelated")
    ]
    for row in document["results"]:
        assert set(row) == {"clients", "strategy", "calls", "completion_ms"}


def test_bad_contention_settings_say_which_field_and_why() -> None:
    with pytest.raises(ValueError, match=r"ContentionSettings\.clients must hold whole numbers"):
        run_contention(clients=[0])
    with pytest.raises(ValueError, match=r"strategies must be among"):
        run_contention(strategies=["fast"])  # type: ignore[list-item]


# -- brownout -------------------------------------------------------------------------


def test_budget_and_breaker_send_less_load_than_a_plain_retrier_in_a_brownout() -> None:
    result = run_brownout(failure_rates=[0.0, 0.1, 0.5, 1.0], calls=400, workers=1)
    for config in ("plain retrier", "budget only", "defaults"):
        healthy = result.row(config, 0.0)
        assert (healthy.load, healthy.success_rate) == (1.0, 1.0)
    # At 10 % the budget takes nothing away from a healthy caller.
    assert result.row("defaults", 0.1).success_rate == result.row("plain retrier", 0.1).success_rate
    # The budget's own bound: 0.27 retries earned a call, plus the 60 tokens it starts
    # with, plus 0.5 a second over the ~4 s of calls (10 s allowed for the tail).
    budget = BudgetSettings()
    bound = 1 + budget.ratio + (budget.max_tokens + budget.min_per_second * 10) / 400
    for rate in (0.5, 1.0):
        assert result.row("defaults", rate).load < 0.8 * result.row("plain retrier", rate).load
        assert 1.2 < result.row("budget only", rate).load <= bound
    assert result.row("plain retrier", 1.0).load == 4.0  # RetryPolicy(): four attempts
    assert result.row("defaults", 1.0).load < 0.5  # the breaker opened: mostly nothing sent
    assert result.row("defaults", 1.0).refused_unsent > 0


def test_your_governor_off_and_two_attempts_doubles_the_load_in_an_outage() -> None:
    result = run_brownout(
        failure_rates=[1.0],
        calls=100,
        policy=RetryPolicy(attempts=2, backoff_base=0.01, backoff_cap=0.01),
        governor=GovernorSettings.off(),
        workers=1,
    )
    assert result.configs[-1] == "yours"
    assert result.row("yours", 1.0).load == 2.0


def test_a_failure_rate_given_twice_is_refused() -> None:
    """Rows are found by (config, rate): a second run at 0.5 could only show the first's."""
    with pytest.raises(
        ValueError,
        match=r"brownout\.failure_rates must list each rate once, got 0\.5 twice \(for another "
        r"draw at the same rate, run again with another seed\)",
    ):
        run_brownout(failure_rates=[0.5, 0.1, 0.5], calls=10, workers=1)


# -- outage ---------------------------------------------------------------------------


def test_the_defaults_fail_fast_in_an_outage_and_recover_soon_after_it() -> None:
    result = run_outage(duration=24.0, down_at=4.0, down_for=10.0, bucket=2.0, workers=1)
    plain, defaults = result.row("plain retrier"), result.row("defaults")
    assert plain.fail_fast_after is None
    assert plain.attempts_per_call_down == pytest.approx(4.0, abs=0.2)
    assert defaults.fail_fast_after is not None
    assert defaults.fail_fast_after < 2.0
    assert defaults.attempts_per_call_down < 0.2 * plain.attempts_per_call_down
    # Open for 5 s, then one probe: every call succeeds again well within 6 s.
    assert defaults.recover_after < 6.0
    assert len(defaults.load_per_s) == 12
    assert defaults.load_per_s[0] == pytest.approx(defaults.offered_per_s[0])


@pytest.mark.parametrize(
    ("duration", "bucket", "buckets"), [(2.1, 0.3, 7), (2.7, 0.3, 9), (0.3, 0.1, 3), (60, 5, 12)]
)
def test_a_run_of_whole_buckets_has_only_whole_buckets(
    duration: float, bucket: float, buckets: int
) -> None:
    """2.1 / 0.3 is 7.000000000000001 in floats (0.3 / 0.1 is 2.9999999999999996): still
    whole buckets of the asked width, and no extra one a rounding error wide."""
    window = OutageWindow(duration=duration, down_at=0.0, down_for=0.0, bucket=bucket)
    assert window.bucket_widths() == (bucket,) * buckets
    assert len(window.bucket_starts()) == buckets


def test_a_partial_last_bucket_keeps_its_true_width() -> None:
    window = OutageWindow(duration=1.0, down_at=0.0, down_for=0.0, bucket=0.3)
    assert window.bucket_starts() == pytest.approx((0.0, 0.3, 0.6, 0.9))
    assert window.bucket_widths() == pytest.approx((0.3, 0.3, 0.3, 0.1))
    # two calls in the last 0.1 s are 20 a second; one at the run's end is past it
    rates = window.per_second([0.0, 0.95, 0.99, 1.0])
    assert rates == pytest.approx((1 / 0.3, 0.0, 0.0, 20.0))


def test_an_outage_in_buckets_of_a_fraction_of_a_second_counts_sane_rates() -> None:
    # (this run used to end in a ZeroDivisionError; 2.7 s gave a tenth column ~0 s wide)
    for duration, columns in ((2.1, 7), (2.7, 9)):
        result = run_outage(
            duration=duration, down_at=0.5, down_for=1.0, bucket=0.3, rate=50.0, workers=1
        )
        assert result.bucket_starts() == pytest.approx([0.3 * index for index in range(columns)])
        for row in result.rows:
            assert len(row.load_per_s) == len(row.offered_per_s) == columns
            # four attempts a call at most, and calls at 50/s: nowhere near 10**15
            assert max(row.load_per_s) < 400


@pytest.mark.parametrize(("seed", "calls"), [(0, 459), (1, 528), (2, 476), (3, 511)])
def test_outage_calls_arrive_only_within_the_run(seed: int, calls: int) -> None:
    """Arrivals are a Poisson process over [0, duration): about rate x duration calls, all
    started within the run, not exactly that many with the last ones started after it."""
    result = run_outage(
        duration=10.0, down_at=0.0, down_for=10.0, bucket=10.0, seed=seed, workers=1
    )
    for row in result.rows:
        assert row.calls == calls
        assert row.offered_per_s == (calls / 10.0,)  # every call started within the run


def test_an_outage_run_is_the_start_of_a_longer_one() -> None:
    """A 10 s run has the arrivals the first 10 s of a 20 s run have (with seed 1, 528 of
    them: a run cut at 500 calls would have stopped short)."""
    short = run_outage(duration=10.0, down_at=2.0, down_for=5.0, bucket=5.0, seed=1, workers=1)
    long = run_outage(duration=20.0, down_at=2.0, down_for=5.0, bucket=5.0, seed=1, workers=1)
    for config in ("plain retrier", "defaults"):
        assert short.row(config).offered_per_s == long.row(config).offered_per_s[:2]
        assert short.row(config).calls == 528
        assert sum(short.row(config).offered_per_s) * 5.0 == pytest.approx(528)


def test_the_same_seed_gives_the_same_outage() -> None:
    first = run_outage(duration=12.0, down_at=2.0, down_for=5.0, seed=3, workers=1)
    again = run_outage(duration=12.0, down_at=2.0, down_for=5.0, seed=3, workers=2)
    assert first == again


def test_processes_each_with_a_governor_of_their_own_send_more_during_an_outage() -> None:
    """Ten processes each see a tenth of the failures: their breakers open later and
    their budgets are ten (trial99: ten real AsyncClients sent 1.97 attempts per call to
    a dead dependency, where the simulator of one process said 0.16)."""
    run = {"duration": 20.0, "down_at": 4.0, "down_for": 8.0, "bucket": 4.0, "workers": 1}
    one, ten = run_outage(**run), run_outage(**run, processes=10)
    assert one == run_outage(**run, processes=1)  # (the default: one process)
    alone, fleet = one.row("defaults"), ten.row("defaults")
    assert fleet.attempts_per_call_down > 5 * alone.attempts_per_call_down
    assert fleet.breaker_opened > 5 * alone.breaker_opened
    # Without a governor the processes are one retry loop each: nothing to split.
    assert ten.row("plain retrier") == one.row("plain retrier")


def test_a_slower_dependency_is_hedged_more_often() -> None:
    hedged = RetryPolicy(hedge_after=0.025)
    rates = {
        latency: run_brownout(
            failure_rates=(0.3,),
            calls=400,
            fault="timeout",
            policy=hedged,
            latency=latency,
            workers=1,
        ).row("yours", 0.3)
        for latency in (0.005, 0.05)
    }
    assert rates[0.005].success_rate > rates[0.05].success_rate + 0.05


def test_an_outage_must_end_within_the_run() -> None:
    with pytest.raises(ValueError, match=r"outage\.down_for must end within the run"):
        run_outage(duration=10.0, down_at=5.0, down_for=6.0)


# -- layers ---------------------------------------------------------------------------


def test_unguarded_layers_multiply_and_the_guard_stops_it() -> None:
    result = run_layers(attempts=[3, 3, 4], requests=20, workers=1)
    assert result.row("no guard, no deadline").calls_per_request == 36.0  # 3 x 3 x 4
    assert result.row("guard only").calls_per_request == 2.0  # nested_attempts=2, once
    assert result.row("deadline only").calls_per_request < 36.0
    assert result.row("deadline only").max_seconds <= 5.0 + 1e-9


def test_a_hanging_bottom_is_cut_off_by_a_propagated_deadline() -> None:
    result = run_layers(attempts=[3, 3, 4], fault="timeout", requests=10, workers=1)
    assert result.row("guard + deadline").max_seconds == pytest.approx(5.0)
    assert result.row("no guard, no deadline").max_seconds > 20.0


def test_layers_succeed_when_the_bottom_is_healthy() -> None:
    result = run_layers(attempts=[2, 2], failure_rate=0.0, requests=10, workers=1)
    assert {row.success_rate for row in result.rows} == {1.0}
    assert {row.calls_per_request for row in result.rows} == {1.0}
