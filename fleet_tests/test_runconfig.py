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
    monkeypatch.setattr(runconfig, "_plans", {})


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
    (create_execution_plan, which resolves the run config and plans the whole job to take its step from it).
    After the prime, that reaches Dagster's own builds zero times, and what it gets equals Dagster's own result."""
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
    from dagster._core.execution.plan.plan import ExecutionPlan
    dagster_plan = ExecutionPlan.build.__wrapped__
    planned = []

    def counted_plan(*args, **kwargs):
        planned.append(kwargs.get("step_keys_to_execute"))
        return dagster_plan(*args, **kwargs)

    monkeypatch.setattr(ExecutionPlan, "build", staticmethod(runconfig.make_plan_build(counted_plan)))
    job = d.scrape_week_job()
    config = {"ops": {}, "loggers": {"console": {"config": {"log_level": "INFO"}}}}
    runconfig.prime(job, config)
    assert calls == ["scrape_week"] and planned == [None]
    step = sorted(n.name for n in job.nodes)[0]
    plan = create_execution_plan(reconstructable(d.scrape_week_job), run_config=config, step_keys_to_execute=[step])
    assert calls == ["scrape_week"], "planning the step resolved the run config again"
    assert planned == [None], "planning the step built the whole plan again"
    assert [s.key for s in plan.get_steps_to_execute_in_topo_order()] == [step]
    assert ResolvedRunConfig.build(job, config).to_dict() == dagster_build(job, config).to_dict()


def _snapshot(plan) -> dict:
    """Everything Dagster records of a plan (its snapshot, as a run stores it), for comparing two."""
    from dagster._core.snap.execution_plan_snapshot import snapshot_from_execution_plan
    from dagster._serdes import serialize_value

    return {"snapshot": serialize_value(snapshot_from_execution_plan(plan, "job-snapshot-id")),
            "to_execute": plan.step_keys_to_execute, "known_state": plan.known_state,
            "executable": sorted(plan.executable_map), "persisted": plan.artifacts_persisted}


def test_a_plan_is_built_once_per_job_and_config_and_each_step_gets_what_dagster_builds(monkeypatch, tmp_path):
    """The whole plan of a job and resolved config is built once; a step's plan of its own step (with the run's
    known state: a retry's count) is Dagster's subset of it, equal to what Dagster builds from scratch, for
    fleet's scrape job and for its publish job, whose steps have inputs."""
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    from dagster._core.execution.plan.plan import ExecutionPlan
    from dagster._core.execution.plan.state import KnownExecutionState
    from dagster._core.system_config.objects import ResolvedRunConfig

    from fleet.defs import definitions as d

    installed = ExecutionPlan.build
    assert getattr(installed, "__wrapped__", None) is not None, "the definitions did not install the plan memo"
    dagster_build = installed.__wrapped__
    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs.get("step_keys_to_execute"))
        return dagster_build(*args, **kwargs)

    build = runconfig.make_plan_build(counted)
    config = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
    for job in (d.scrape_week_job(), d.publish_week_job()):
        calls.clear()
        resolved = ResolvedRunConfig.build(job, config)
        whole = build(job, resolved)
        keys = whole.step_keys_to_execute
        assert len(keys) >= 3 and calls == [None]
        assert _snapshot(whole) == _snapshot(dagster_build(job, resolved))
        for key in (keys[0], keys[-1]):
            state = KnownExecutionState(previous_retry_attempts={key: 1})
            mine = build(job, resolved, step_keys_to_execute=[key], known_state=state)
            assert _snapshot(mine) == _snapshot(dagster_build(job, resolved, step_keys_to_execute=[key],
                                                             known_state=state)), key
        assert calls == [None], "a step's plan built the whole plan again"
        build(job, resolved, tags={"a": "b"})  # not a plain request: Dagster's own build
        assert calls == [None, None]
