"""What each scenario's figures mean, and what its documented defaults are: small seeded runs
on the virtual clock, each checked against the definition the docs give."""

from __future__ import annotations

import dataclasses
import inspect
import math
import statistics

import pytest

from retrysafe import BreakerSettings, GovernorSettings, RetryPolicy
from retrysafe.simulate import contention as contention_module
from retrysafe.simulate import layers as layers_module
from retrysafe.simulate import run_brownout, run_contention, run_layers, run_outage
from retrysafe.simulate.brownout import DEFAULT_RATES
from retrysafe.simulate.configs import Config
from retrysafe.simulate.contention import ContentionSettings, engine_run, formula_run
from retrysafe.simulate.formulas import formula_wait
from retrysafe.simulate.layers import LayerConfig
from retrysafe.simulate.traffic import TrafficShape, run_traffic

# -- documented defaults (docs/simulate.md) ---------------------------------------------


def _defaults(function: object) -> dict[str, object]:
    parameters = inspect.signature(function).parameters  # type: ignore[arg-type]
    return {name: parameter.default for name, parameter in parameters.items()}


def test_the_scenarios_defaults_are_the_documented_ones() -> None:
    settings = ContentionSettings()
    assert tuple(settings.clients) == tuple(range(10, 191, 20))
    assert settings.runs == 100
    assert (settings.latency, settings.latency_sd) == (0.010, 0.002)
    assert (settings.backoff_base, settings.backoff_cap) == (0.005, 2.0)
    brownout = _defaults(run_brownout)
    assert (brownout["calls"], brownout["rate"], brownout["latency"]) == (2000, 100.0, 0.020)
    assert pytest.approx([step / 10 for step in range(11)]) == DEFAULT_RATES  # 0 % to 100 %
    outage = _defaults(run_outage)
    assert (outage["rate"], outage["duration"], outage["bucket"]) == (50.0, 60.0, 5.0)
    assert (outage["down_at"], outage["down_for"]) == (10.0, 20.0)
    layers = _defaults(run_layers)
    assert (layers["attempts"], layers["failure_rate"], layers["user_deadline"]) == (
        (3, 3, 4),
        1.0,
        5.0,
    )


# -- contention -------------------------------------------------------------------------


def test_contention_rows_are_the_means_of_the_runs_with_times_in_milliseconds() -> None:
    settings = ContentionSettings(clients=(10,), runs=3, strategies=("none", "decorrelated"))
    result = run_contention(settings=settings, workers=1)
    for strategy in ("none", "decorrelated"):
        runs = [formula_run(settings, strategy, 10, run) for run in range(3)]  # type: ignore[arg-type]
        row = result.row(10, strategy)
        assert row.calls == pytest.approx(sum(writes for writes, _ in runs) / 3)
        assert row.completion_ms == pytest.approx(1000 * sum(done for _, done in runs) / 3)
        assert row.calls >= 10  # every client writes at least once


def test_no_backoff_retries_at_once_and_the_formula_run_starts_decorrelated_from_base(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``previous`` is the last wait, ``base`` before the first; ``retries`` counts up."""
    seen: list[tuple[str, int, float, float]] = []

    def recorded(strategy, retries, previous, base, cap, rng):  # type: ignore[no-untyped-def]
        wait = formula_wait(strategy, retries, previous, base, cap, rng)
        seen.append((strategy, retries, previous, wait))
        return wait

    monkeypatch.setattr(contention_module, "formula_wait", recorded)
    settings = ContentionSettings(clients=(2,), runs=1)
    formula_run(settings, "decorrelated", 5, 0)
    first = [entry for entry in seen if entry[1] == 0]
    assert first
    assert all(previous == settings.backoff_base for _, _, previous, _ in first)
    assert max(retries for _, retries, _, _ in seen) >= 1
    seen.clear()
    formula_run(settings, "none", 5, 0)
    assert seen
    assert {wait for *_, wait in seen} == {0.0}


def test_your_policy_alone_or_your_governor_alone_runs_yours_with_the_other_the_default() -> None:
    """Enough retries for the default retry budget to matter: GovernorSettings() is not off."""
    policy = RetryPolicy(attempts=10, backoff_base=0.005, backoff_cap=0.01)
    alone = run_contention(clients=[40], runs=1, strategies=["full"], policy=policy, workers=1)
    spelled = run_contention(
        clients=[40],
        runs=1,
        strategies=["full"],
        policy=policy,
        governor=GovernorSettings(),
        workers=1,
    )
    assert [row.strategy for row in alone.rows] == ["full", "yours"]
    assert alone.row(40, "yours") == spelled.row(40, "yours")
    governed = run_contention(
        clients=[20], runs=1, strategies=["full"], governor=GovernorSettings.off(), workers=1
    )
    assert [row.strategy for row in governed.rows] == ["full", "yours"]


def test_gave_up_is_the_mean_number_of_clients_per_run() -> None:
    policy = RetryPolicy(attempts=2, backoff_base=0.005, backoff_cap=0.01)
    off = GovernorSettings.off()
    result = run_contention(
        clients=[30], runs=3, strategies=["none"], policy=policy, governor=off, workers=1
    )
    settings = result.settings
    per_run = [engine_run(settings, settings.yours_policy(), off, 30, run)[2] for run in range(3)]
    gave_up = result.row(30, "yours").gave_up
    assert gave_up == pytest.approx(sum(per_run) / 3)
    assert 0 < gave_up <= 30


def test_a_backoff_base_equal_to_the_cap_is_allowed() -> None:
    settings = ContentionSettings(clients=(3,), runs=1, backoff_base=0.01, backoff_cap=0.01)
    assert settings.backoff_base == settings.backoff_cap


def test_the_lost_write_rule_comes_before_your_own_rules() -> None:
    """Your rules still run, but a lost write is always a retry, whatever they say of a 412."""

    def no_412_retries(response):  # type: ignore[no-untyped-def]
        from retrysafe.classify import Verdict

        return Verdict.permanent("precondition") if response.status_code == 412 else None

    policy = RetryPolicy(attempts=50, rules=(no_412_retries,))
    settings = ContentionSettings(clients=(10,), runs=1, policy=policy)
    assert settings.yours_policy().rules[1:] == (no_412_retries,)
    assert settings.yours_policy().rules[0] is contention_module.lost_write_is_retryable
    result = run_contention(settings=dataclasses.replace(settings, strategies=()), workers=1)
    assert result.row(10, "yours").gave_up == 0


# -- brownout ---------------------------------------------------------------------------


def test_brownout_figures_are_per_call_and_the_json_says_which_is_which() -> None:
    result = run_brownout(failure_rates=[0.3], calls=150, workers=1)
    for row in result.rows:
        assert row.calls == 150  # exactly the calls asked for, at every rate
        document = row.to_json()
        assert document["load"] == row.attempts / 150
        assert document["success_rate"] == row.succeeded / 150
        assert document["refused_unsent"] == row.refused_unsent
    assert result.row("plain retrier", 0.3).load > 1.0


def test_only_the_breaker_refuses_calls_unsent() -> None:
    result = run_brownout(failure_rates=[1.0], calls=200, workers=1)
    plain, defaults = result.row("plain retrier", 1.0), result.row("defaults", 1.0)
    assert (plain.succeeded, plain.refused_unsent, plain.breaker_opened) == (0, 0, 0)
    assert (defaults.succeeded, defaults.breaker_opened > 0) == (0, True)
    # calls the breaker refused sent nothing: the rest sent at least one attempt each
    assert 0 < defaults.refused_unsent <= 200 - defaults.attempts / 4


def test_in_brownout_your_missing_half_is_the_default() -> None:
    """``yours`` with only a policy has GovernorSettings(); with only a governor, RetryPolicy()."""
    policy_only = run_brownout(failure_rates=[1.0], calls=120, policy=RetryPolicy(), workers=1)
    yours, defaults = policy_only.row("yours", 1.0), policy_only.row("defaults", 1.0)
    assert dataclasses.replace(yours, config="defaults") == defaults
    governor_only = run_brownout(
        failure_rates=[1.0], calls=120, governor=GovernorSettings.off(), workers=1
    )
    yours, plain = governor_only.row("yours", 1.0), governor_only.row("plain retrier", 1.0)
    assert dataclasses.replace(yours, config="plain retrier") == plain


def test_hanging_attempts_reach_the_dependency_and_count_in_its_load() -> None:
    """A dependency that never answers still got the attempt: RetryPolicy() fits three 10 s
    attempts in its 30 s deadline, and each of them is load."""
    result = run_brownout(failure_rates=[0.0, 1.0], calls=40, fault="timeout", workers=1)
    assert result.row("plain retrier", 1.0).load == 3.0
    assert result.row("plain retrier", 1.0).success_rate == 0.0
    assert result.row("plain retrier", 0.0).success_rate == 1.0


# -- traffic ----------------------------------------------------------------------------


_PLAIN = Config("one attempt", RetryPolicy(attempts=1), GovernorSettings.off())


def test_every_call_draws_its_jitter_from_its_own_stream() -> None:
    """Fixed latencies and a dependency that always fails: a call's length is its two
    latencies plus its own jitter draw, so no two calls take the same time."""
    config = Config(
        "two attempts",
        RetryPolicy(attempts=2, backoff_base=1.0, backoff_cap=1.0, min_attempt_time=0.0),
        GovernorSettings.off(),
    )
    shape = TrafficShape(calls=30, rate=10.0, latency=0.02, latency_sd=0.0)
    traffic = run_traffic(config, shape, lambda _now: 1.0, seed=2, stream=0)
    durations = [end.ended - end.started for end in traffic.ends]
    assert len(durations) == 30
    assert all(0.04 <= duration <= 1.04 for duration in durations)
    assert len({round(duration, 9) for duration in durations}) == 30


def test_streams_do_not_share_the_dependencys_random_numbers() -> None:
    """Two streams (two failure rates in a brownout) draw different failures."""
    shape = TrafficShape(calls=60, rate=10.0)
    patterns = []
    for stream in (0, 1):
        traffic = run_traffic(_PLAIN, shape, lambda _now: 0.5, seed=0, stream=stream)
        ends = sorted(traffic.ends, key=lambda end: end.started)
        patterns.append([end.ok for end in ends])
    assert patterns[0] != patterns[1]
    assert 10 < sum(patterns[0]) < 50  # about half of them


def test_the_first_call_arrives_after_a_poisson_gap_not_at_zero() -> None:
    traffic = run_traffic(
        _PLAIN, TrafficShape(calls=5, rate=1.0), lambda _now: 0.0, seed=0, stream=0
    )
    assert traffic.started == 5
    assert min(end.started for end in traffic.ends) > 0.0


# -- outage -----------------------------------------------------------------------------


def test_outage_figures_follow_their_definitions_from_every_calls_end() -> None:
    """Each figure of a row, recomputed from the calls of the same run (same shape, seed,
    stream) as the docs define it."""
    breaker = BreakerSettings(open_for=3.0)
    result = run_outage(
        duration=16.0,
        down_at=3.0,
        down_for=6.0,
        bucket=4.0,
        rate=25.0,
        seed=5,
        governor=GovernorSettings(breaker=breaker),
        workers=1,
    )
    window = result.window
    assert (window.down_at, window.up_at) == (3.0, 9.0)
    for row in result.rows:
        config = Config(row.config, RetryPolicy(), _GOVERNORS[row.config](breaker))
        traffic = run_traffic(config, result.shape, window.failing, seed=5, stream=0)
        ends = traffic.ends
        down = [end for end in ends if 3.0 <= end.started < 9.0]
        refused = [end.started for end in ends if end.refused_unsent and end.started >= 3.0]
        failed_after = [end.started for end in ends if not end.ok and end.started >= 9.0]
        durations = sorted(end.ended - end.started for end in down if not end.ok)
        assert row.calls == traffic.started == len(ends)
        assert row.attempts_per_call_down == pytest.approx(
            sum(3.0 <= moment < 9.0 for moment in traffic.arrivals) / len(down)
        )
        assert row.fail_fast_after == (min(refused) - 3.0 if refused else None)
        assert row.recover_after == (max(failed_after) - 9.0 if failed_after else 0.0)
        assert row.failure_p50 == pytest.approx(statistics.median(durations))
        assert row.success_rate == sum(end.ok for end in ends) / len(ends)
        assert row.breaker_opened == traffic.breaker_opened
        assert row.load_per_s == window.per_second(list(traffic.arrivals))
        assert row.offered_per_s == window.per_second([end.started for end in ends])
    assert result.row("yours").recover_after > 0.0  # still open when the outage ended
    assert result.row("yours").fail_fast_after is not None


_GOVERNORS = {
    "plain retrier": lambda _breaker: GovernorSettings.off(),
    "budget only": lambda _breaker: GovernorSettings(breaker=None),
    "defaults": lambda _breaker: GovernorSettings(),
    "yours": lambda breaker: GovernorSettings(breaker=breaker),
}


def test_the_outage_json_names_its_window() -> None:
    result = run_outage(duration=6.0, down_at=1.0, down_for=2.0, bucket=3.0, rate=5.0, workers=1)
    document = result.to_json()
    assert {key: document[key] for key in document if key.endswith("_s")} == {
        "rate_per_s": 5.0,
        "duration_s": 6.0,
        "down_at_s": 1.0,
        "down_for_s": 2.0,
        "bucket_s": 3.0,
        "latency_s": 0.02,
    }
    assert (document["scenario"], document["fault"], document["seed"]) == ("outage", "503", 0)
    assert document["processes"] == 1
    assert [row["config"] for row in document["results"]] == [
        "plain retrier",
        "budget only",
        "defaults",
    ]


def test_an_outage_may_have_a_thousand_columns_and_no_more() -> None:
    result = run_outage(duration=1.0, bucket=0.001, down_at=0.2, down_for=0.5, rate=5.0, workers=1)
    assert len(result.bucket_starts()) == 1000
    with pytest.raises(ValueError, match="too small for the run"):
        run_outage(duration=1.0, bucket=0.000999, down_at=0.2, down_for=0.5, rate=5.0, workers=1)


# -- layers -----------------------------------------------------------------------------


def test_an_attempt_that_times_out_abandons_the_calls_below_it() -> None:
    """The bottom never answers: each top attempt (10 s of RetryPolicy()'s 30 s deadline)
    reaches it once, and when it times out the calls below it are abandoned, so they
    make no further attempts: 3 calls at the bottom per request, not 3 x 3 x 3."""
    result = run_layers(attempts=[3, 3, 3], fault="timeout", requests=4, workers=1)
    row = result.row("no guard, no deadline")
    assert row.calls_per_request == 3.0
    assert row.max_seconds == pytest.approx(30.0)


def test_layers_yours_propagates_the_deadline_and_has_the_missing_half_the_default() -> None:
    """Against a bottom that hangs only the propagated deadline cuts a request short (5 s,
    not RetryPolicy()'s 30 s): ``yours`` with the governor off is "deadline only"."""
    off = run_layers(
        attempts=[2, 2], fault="timeout", requests=4, governor=GovernorSettings.off(), workers=1
    )
    assert off.row("deadline only").max_seconds == pytest.approx(5.0)
    assert dataclasses.replace(off.row("yours"), config="deadline only") == off.row("deadline only")
    policy_only = run_layers(attempts=[2, 3], requests=10, policy=RetryPolicy(), workers=1)
    spelled = run_layers(
        attempts=[2, 3],
        requests=10,
        policy=RetryPolicy(),
        governor=GovernorSettings(),
        workers=1,
    )
    assert policy_only.row("yours") == spelled.row("yours")
    assert (
        policy_only.row("yours").calls_per_request
        < policy_only.row("deadline only").calls_per_request
    )


def test_a_call_whose_caller_gave_up_during_the_hop_is_not_served() -> None:
    """The top layer's only attempt times out (0.5 ms) before its request reaches the layer
    below (a 1 ms hop): that layer does nothing, and nothing reaches the dependency."""
    policy = RetryPolicy(attempt_timeout=0.0005, min_attempt_time=0.0)
    result = run_layers(
        attempts=[1, 1],
        failure_rate=0.0,
        requests=5,
        policy=policy,
        governor=GovernorSettings.off(),
        workers=1,
    )
    yours = result.row("yours")
    assert (yours.bottom_calls, yours.success_rate) == (0, 0.0)
    assert yours.max_seconds == pytest.approx(0.0005)
    # the same without deadline propagation (no zero deadline to stop the layer below):
    # the layer still does not start a call for a caller that is gone
    unpropagated = LayerConfig("no deadline", policy, GovernorSettings.off(), False)
    row = layers_module._job((unpropagated, (1, 1), 0.0, "503", 5.0, 5, 5.0, 0))
    assert (row.bottom_calls, row.succeeded) == (0, 0)


def test_layers_times_are_the_mean_and_the_slowest_request() -> None:
    """Healthy: one bottom call of ~20 ms plus four 1 ms hops over two layers."""
    result = run_layers(attempts=[2, 2], failure_rate=0.0, requests=40, workers=1)
    row = result.row("no guard, no deadline")
    assert row.mean_seconds == pytest.approx(0.024, abs=0.002)
    assert 0.024 < row.max_seconds < 0.06
    assert row.mean_seconds < row.max_seconds


def test_calls_that_can_never_end_are_counted_unfinished_and_failed() -> None:
    """No attempt timeout, no deadline, and a dependency that never answers."""
    endless = RetryPolicy(attempt_timeout=math.inf, deadline=math.inf)
    config = Config("endless", endless, GovernorSettings.off())
    shape = TrafficShape(calls=12, rate=10.0, fault="timeout")
    traffic = run_traffic(config, shape, lambda _now: 1.0, seed=0, stream=0)
    assert (traffic.started, traffic.unfinished, traffic.ends) == (12, 12, ())
    assert len(traffic.arrivals) == 12
    brownout = run_brownout(
        failure_rates=[1.0], calls=12, fault="timeout", policy=endless, workers=1
    )
    row = brownout.row("yours", 1.0)
    assert (row.calls, row.attempts, row.succeeded, row.success_rate) == (12, 12, 0, 0.0)


def test_the_brownout_and_layers_json_name_their_settings() -> None:
    brownout = run_brownout(failure_rates=[0.2], calls=30, rate=50.0, seed=4, workers=1).to_json()
    assert {key: brownout[key] for key in brownout if key != "results"} == {
        "scenario": "brownout",
        "calls": 30,
        "rate_per_s": 50.0,
        "fault": "503",
        "latency_s": 0.02,
        "processes": 1,
        "seed": 4,
    }
    layers = run_layers(
        attempts=[2, 1], failure_rate=0.5, user_deadline=3.0, requests=5, seed=2, workers=1
    ).to_json()
    assert {key: layers[key] for key in layers if key != "results"} == {
        "scenario": "layers",
        "layers": [2, 1],
        "failure_rate": 0.5,
        "fault": "503",
        "user_deadline_s": 3.0,
        "seed": 2,
    }
    assert [row["config"] for row in layers["results"]] == [
        "no guard, no deadline",
        "deadline only",
        "guard only",
        "guard + deadline",
    ]


def test_a_stack_may_have_eight_layers_and_no_more() -> None:
    result = run_layers(attempts=[1] * 8, failure_rate=0.0, requests=2, workers=1)
    assert result.row("no guard, no deadline").calls_per_request == 1.0
    with pytest.raises(ValueError, match="must name 1 to 8 layers, got 9"):
        run_layers(attempts=[1] * 9, requests=2, workers=1)


def test_a_request_that_succeeds_on_a_retry_counts_as_a_success() -> None:
    """One layer of 4 attempts against a dependency failing half of them: about 15 in 16
    requests succeed (1 - 0.5 ** 4), most of them not on their first attempt."""
    result = run_layers(attempts=[4], failure_rate=0.5, requests=40, workers=1)
    row = result.row("no guard, no deadline")
    assert row.success_rate >= 0.8
    assert 1.5 < row.calls_per_request < 4.0
