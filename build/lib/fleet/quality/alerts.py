"""Alert delivery (no Dagster): exactly one alert per (source, week, check, severity), to a JSONL log and optional sinks.

Files under ``<home>/alerts/``:
  alerts.jsonl  one JSON line per delivered alert (with ``webhook_error`` when the webhook failed): the ledger too,
                appended and synced before the next alert goes out
  .lock         ``fcntl.flock`` lock held for a whole ``deliver`` call, so concurrent processes never send twice

Sinks: the JSONL log always; a webhook (``webhook=`` or ``FLEET_ALERT_WEBHOOK``) gets the alert as a JSON POST
(timeout 5 s, 2 retries on connection errors; failures are logged and recorded, never raised); Slack (``slack=``
channel or ``FLEET_ALERT_SLACK``, token ``FLEET_SLACK_TOKEN``) through dagster-slack (the ``slack`` extra), which
``config.settings()`` refuses to start without; a delivery that finds it missing all the same skips it with a
warning. An alert whose webhook failed still counts as delivered (it is in the log) and is not resent.

Routes: an alert about a source whose scraper names an ``owner`` (fleet/scraping/contract.py) goes to that owner's
route in FLEET_ALERT_ROUTES (a JSON object, owner -> webhook URL or ``slack:#channel``) instead of the default
webhook and Slack channel; an unowned source, an owner without a route, and a week's alert go to the default.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterable

from fleet import config
from fleet.weeks import utc_now

log = logging.getLogger("fleet.alerts")

WEBHOOK_TIMEOUT_S = 5.0
WEBHOOK_RETRIES = 2
_RETRY_PAUSE_S = (0.2, 0.5)


@dataclasses.dataclass(frozen=True)
class Alert:
    source: str | None
    week: str
    check: str
    severity: str
    category: str | None
    message: str
    evidence: dict            # {"screenshot": path, "html": path} when known
    last_good_week: str | None
    run_id: str | None = None
    owner: str | None = None  # the source's owner, when its scraper names one: its alert went to the owner's route

    @property
    def key(self) -> str:
        return "|".join((self.source or "-", self.week, self.check, self.severity))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ------------------------------------------------------------------------------------------ building alerts


def from_source_checks(source: str, week: str, outcomes: Iterable, *, category: str | None = None,
                       evidence: dict | None = None, last_good_week: str | None = None,
                       run_id: str | None = None) -> list[Alert]:
    """Alerts for the failed ``fleet.checks.CheckOutcome``s of one source's week."""
    return [Alert(source=source, week=week, check=o.name, severity=o.severity, category=category, message=o.message,
                  evidence=dict(evidence or {}), last_good_week=last_good_week, run_id=run_id)
            for o in outcomes if not o.passed]


def from_week_checks(week: str, results: Iterable[dict], *, run_id: str | None = None) -> list[Alert]:
    """Alerts for the failed entries of ``fleet.checks.week_checks``."""
    return [Alert(source=r.get("source"), week=week, check=r["check"], severity=r["severity"],
                  category=r.get("category"), message=r["message"], evidence=dict(r.get("evidence") or {}),
                  last_good_week=r.get("last_good_week"), run_id=run_id)
            for r in results if not r.get("passed")]


# ------------------------------------------------------------------------------------------ ledger


@contextlib.contextmanager
def _locked(folder: Path):
    """Held for a whole delivery, so processes delivering at once never send an alert twice. The kernel drops it
    with its file: a process that dies holding it blocks no one."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        yield


def _records(path: Path) -> list[dict[str, Any]]:
    """``alerts.jsonl``'s records, oldest first, without a line cut short by a crash mid-append."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _key(rec: dict) -> str:
    return "|".join((rec.get("source") or "-", str(rec.get("week")), str(rec.get("check")), str(rec.get("severity"))))


def _append_line(path: Path, record: dict) -> None:
    line = json.dumps(record, sort_keys=True, default=str) + "\n"
    with open(path, "ab+") as fh:
        end = fh.seek(0, os.SEEK_END)
        if end:
            fh.seek(end - 1)
            if fh.read(1) != b"\n":  # a line a crash cut short: this record must not join it, and be lost with it
                line = "\n" + line
        fh.write(line.encode())
        fh.flush()
        os.fsync(fh.fileno())


# ------------------------------------------------------------------------------------------ sinks


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, urllib.error.HTTPError):
        return False
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    return isinstance(exc, (ConnectionError, TimeoutError, socket.timeout, urllib.error.URLError, OSError))


def _post_webhook(url: str, alert: Alert) -> str | None:
    """POST the alert; None on success, else the error text. Never raises."""
    body = json.dumps(alert.to_json(), sort_keys=True, default=str).encode()
    last = "unknown error"
    for attempt in range(WEBHOOK_RETRIES + 1):
        req = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "fleet-alerts"})
        try:
            with urllib.request.urlopen(req, timeout=WEBHOOK_TIMEOUT_S) as resp:
                resp.read()
            return None
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code} {exc.reason}"
        except Exception as exc:  # noqa: BLE001 - a webhook must never break the run
            last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            if not _is_connection_error(exc) or attempt == WEBHOOK_RETRIES:
                return last
            time.sleep(_RETRY_PAUSE_S[min(attempt, len(_RETRY_PAUSE_S) - 1)])
    return last


def _slack_client(channel: str):
    try:
        from dagster_slack import SlackResource  # type: ignore[import-not-found]
    except ImportError:
        log.warning("slack alerts for channel %s skipped: dagster-slack is not installed "
                    "(pip install 'fleet[slack]')", channel)
        return None
    token = config.slack_token()
    if not token:
        log.warning("slack alerts for channel %s skipped: FLEET_SLACK_TOKEN is not set", channel)
        return None
    try:
        return SlackResource(token=token).get_client()
    except Exception as exc:  # noqa: BLE001
        log.warning("slack alerts for channel %s skipped: %s", channel, exc)
        return None


def _post_slack(client, channel: str, alert: Alert) -> str | None:
    try:
        client.chat_postMessage(channel=channel, text=_line(alert))
        return None
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"


# ------------------------------------------------------------------------------------------ delivery


def parse_routes(text: str, setting: str = "FLEET_ALERT_ROUTES") -> dict[str, str]:
    """``text`` (a JSON object, owner -> an http(s) webhook URL or ``slack:#channel``) as a dict; anything else is
    a FleetError naming ``setting`` and the entry at fault."""
    from fleet.errors import FleetError
    from fleet.scraping.contract import valid_owner

    try:
        routes = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise FleetError(f"{setting} must be a JSON object of owner -> webhook URL or slack:#channel: {exc}") from None
    if not isinstance(routes, dict):
        raise FleetError(f"{setting} must be a JSON object of owner -> webhook URL or slack:#channel, got {text!r}")
    for owner, route in routes.items():
        if not valid_owner(owner):
            raise FleetError(f"{setting}: {owner!r} is not an owner (an email address, or team:NAME)")
        if not isinstance(route, str) or not (route.lower().startswith(("http://", "https://"))
                                              or (route.startswith("slack:") and len(route) > 6)):
            raise FleetError(f"{setting}: the route of {owner!r} must be an http(s) URL or slack:#channel, "
                             f"got {route!r}")
    if any(r.startswith("slack:") for r in routes.values()):
        config.require_extra("dagster_slack", "slack", f"a slack: route in {setting}")
        if not config.slack_token():
            raise FleetError(f"a slack: route in {setting} needs FLEET_SLACK_TOKEN, the token of a Slack app")
    return routes


def deliver(alerts: list[Alert], home: Path, *, webhook: str | None = None, slack: str | None = None,
            owners: dict[str, str | None] | None = None, routes: dict[str, str] | None = None) -> list[Alert]:
    """Send the alerts not sent before (by source, week, check, severity); return those newly sent.

    ``webhook``/``slack`` default to ``FLEET_ALERT_WEBHOOK``/``FLEET_ALERT_SLACK``; pass ``""`` to disable.
    ``owners``: source -> its scraper's owner; ``routes``: owner -> route (default: FLEET_ALERT_ROUTES). A source
    whose owner has a route is alerted there alone; the others by the default webhook and Slack channel.
    """
    if webhook is None:
        webhook = config.alert_webhook()
    if slack is None:
        slack = config.alert_slack()
    if routes is None:
        routes = parse_routes(config.alert_routes_text())
    owners = owners or {}
    alerts = [dataclasses.replace(a, owner=owners.get(a.source)) if owners.get(a.source) else a for a in alerts]
    folder = Path(home) / "alerts"
    log_path = folder / "alerts.jsonl"
    sent: list[Alert] = []
    with _locked(folder):
        done = {_key(rec) for rec in _records(log_path)}
        todo: list[Alert] = []
        for alert in alerts:
            if alert.key not in done:
                done.add(alert.key)
                todo.append(alert)
        if not todo:
            return []
        clients: dict[str, Any] = {}
        down: dict[str, str] = {}  # webhook URL -> why it was unreachable earlier in this batch
        for alert in todo:
            record = {**alert.to_json(), "sent_at": utc_now().isoformat(timespec="seconds")}
            route = routes.get(alert.owner) if alert.owner else None
            hook, channel = (webhook, slack) if route is None else \
                (None, route[len("slack:"):]) if route.startswith("slack:") else (route, None)
            if route is not None:
                record["route"] = alert.owner
            if hook:
                err = f"skipped: webhook unreachable earlier in this batch ({down[hook]})" if hook in down \
                    else _post_webhook(hook, alert)
                if err:
                    record["webhook_error"] = err
                    if hook not in down:
                        log.warning("alert webhook failed for %s: %s", alert.key, err)
                        if not err.startswith("HTTP "):
                            down[hook] = err
            if channel and channel not in clients:
                clients[channel] = _slack_client(channel)
            if channel and clients[channel] is not None:
                err = _post_slack(clients[channel], channel, alert)
                if err:
                    record["slack_error"] = err
                    log.warning("slack alert failed for %s: %s", alert.key, err)
            _append_line(log_path, record)
            sent.append(alert)
    return sent


def logged(home: Path, *, week: str | None = None, run_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The delivered alerts as ``alerts.jsonl`` records them (with ``sent_at``), oldest first: only those of
    ``week`` if given, and only those raised by the runs ``run_ids`` if given (an empty list: none).

    Each alert is delivered once, by the run that first found its problem, so ``run_ids`` picks what a run
    (or a ``fleet run``'s runs) newly reported; without it a week lists every alert ever delivered for it."""
    wanted = None if run_ids is None else set(run_ids)
    return [rec for rec in _records(Path(home) / "alerts" / "alerts.jsonl")
            if (week is None or rec.get("week") == week) and (wanted is None or rec.get("run_id") in wanted)]


def _line(alert: Alert) -> str:
    extra = []
    if alert.category:
        extra.append(f"category {alert.category}")
    if alert.last_good_week:
        extra.append(f"last good week {alert.last_good_week}")
    for kind in ("screenshot", "html", "trace"):
        if alert.evidence.get(kind):
            extra.append(f"{kind} {alert.evidence[kind]}")
    tail = f" ({'; '.join(extra)})" if extra else ""
    return f"[{alert.severity}] {alert.week} {alert.source or '(all sources)'} {alert.check}: {alert.message}{tail}"


def summary(alerts: list[Alert]) -> str:
    """One line per alert, for the end of ``fleet run``."""
    if not alerts:
        return "no alerts"
    return "\n".join(_line(a) for a in alerts)
