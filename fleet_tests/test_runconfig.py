"""A job's run config is resolved once per process (fleet/defs/runconfig.py): the memo with fakes, then Dagster's
own planning of one step of fleet's scrape job after `fleet run`'s prime."""
import pytest

from fleet.defs import runconfig


class Job:
    pass


def counting_build(fail_on=None):
    calls = []

    def original(job_def, run_config=None):
        calls.append((job_def, run_config))
        if fail_on is not None and run_config == fail_on:
            raise ValueError("invalid config")
        return ("resolved", len(calls))

    return original, calls


@pytest.fixture(autouse=True)
def empty_cache(monkeypatch):
    monkeypatch.setattr(runconfig, "_cache", {})


def test_the_same_job_and_config_resolve_once_and_anything_else_again():
    original, calls = counting_build()
    build = runconfig.make_build(original)
    job, other = Job(), Job()
    first = build(job, {"ops": {"a": {"config": {"x": 1}}}, "loggers": {}})
    assert build(job, {"loggers": {}, "ops": {"a": {"config": {"x": 1}}}}) is first  # equal config, any key order
    assert len(calls) == 1
    assert build(job, {"ops": {"a": {"config": {"x": 2}}}, "loggers": {}}) != first  # another config
    assert build(other, {"ops": {"a": {"config": {"x": 1}}}, "loggers": {}}) != first  # another job
    assert len(calls) == 3
    assert build(job, None) is build(job, {})  # no config is the empty one
    assert len(calls) == 4


def test_a_config_that_fails_is_never_cached_and_plain_data_only_is():
    bad = {"ops": {"a": {"config": {"x": "nope"}}}}
    original, calls = counting_build(fail_on=bad)
    build = runconfig.make_build(original)
    job = Job()
    for _ in range(2):
        with pytest.raises(ValueError, match="invalid config"):
            build(job, bad)
    assert len(calls) == 2
    odd = {"ops": {"a": {"config": {"x": object()}}}}  # not JSON: resolved every time, as Dagster does
    build(job, odd)
    build(job, odd)
    assert len(calls) == 4 and len(runconfig._cache) == 0


def test_the_cache_is_bounded_and_an_entry_never_answers_for_a_new_job_at_a_reused_id():
    original, calls = counting_build()
    build = runconfig.make_build(original)
    jobs = [Job() for _ in range(runconfig.MAX_ENTRIES + 3)]
    for job in jobs:
        build(job, {})
    assert len(runconfig._cache) == runconfig.MAX_ENTRIES
    stale = Job()
    runconfig._cache[(id(stale), "{}")] = (Job(), "someone else's")  # as if stale's id had been another job's
    assert build(stale, {}) != "someone else's"


def test_a_step_planned_after_the_prime_resolves_nothing(monkeypatch, tmp_path):
    """What a step forked from `fleet run`'s forkserver does first: Dagster plans its one step
    (create_execution_plan, which resolves the run config). After the prime, that reaches Dagster's own build
    zero times, and what it gets equals Dagster's own result."""
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    from dagster import reconstructable
    from dagster._core.execution.api import create_execution_plan
    from dagster._core.system_config.objects import ResolvedRunConfig

    from fleet.defs import definitions as d

    installed = ResolvedRunConfig.build
    assert getattr(installed, "__wrapped__", None) is not None, "the definitions did not install the memo"
    dagster_build = installed.__wrapped__
    calls = []

    def counted(job_def, run_config=None):
        calls.append(job_def.name)
        return dagster_build(job_def, run_config)

    monkeypatch.setattr(ResolvedRunConfig, "build", staticmethod(runconfig.make_build(counted)))
    job = d.scrape_week_job()
    config = {"ops": {}, "loggers": {"console": {"config": {"log_level": "INFO"}}}}
    runconfig.prime(job, config)
    assert calls == ["scrape_week"]
    step = sorted(n.name for n in job.nodes)[0]
    plan = create_execution_plan(reconstructable(d.scrape_week_job), run_config=config, step_keys_to_execute=[step])
    assert calls == ["scrape_week"], "planning the step resolved the run config again"
    assert [s.key for s in plan.get_steps_to_execute_in_topo_order()] == [step]
    assert ResolvedRunConfig.build(job, config).to_dict() == dagster_build(job, config).to_dict()
