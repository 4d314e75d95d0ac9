"""twicejobs: enqueue twice jobs from Python.

Two ways in, both checked by the same rules as a Go enqueue (the kind's
published fields, the payload policy, the size cap, the queue and key
rules):

* enqueue(conn, kind, args, ...) calls the database's twice_enqueue in the
  caller's transaction (psycopg 3): the job commits with the application's
  own writes or not at all, and the workers are woken on commit.
* HTTPClient(base_url, token).enqueue(kind, args, ...) calls the JSON API a
  twiceweb dashboard serves under /api/v1, with an Idempotency-Key so a
  retried request never makes a second job.

Refusals raise a subclass of TwiceError that says what to fix.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import datetime
from typing import Any, Mapping, Optional

__all__ = [
    "TwiceError",
    "InvalidKind",
    "UnknownKind",
    "InvalidArgs",
    "SensitiveArgs",
    "ArgsTooLarge",
    "InvalidOpts",
    "InvalidQueue",
    "InvalidKey",
    "APIError",
    "enqueue",
    "HTTPClient",
]


class TwiceError(Exception):
    """A refused enqueue: the message says what to fix.

    sqlstate is the database's code (class TW) for a refusal of
    twice_enqueue, None for the HTTP API's.
    """

    sqlstate: Optional[str] = None

    def __init__(self, message: str, sqlstate: Optional[str] = None):
        super().__init__(message)
        if sqlstate is not None:
            self.sqlstate = sqlstate


class InvalidKind(TwiceError):
    """The kind is missing or malformed (TW001)."""

    sqlstate = "TW001"


class UnknownKind(TwiceError):
    """No worker published the kind to the catalog (TW002); pass force=True
    to store it anyway."""

    sqlstate = "TW002"


class InvalidArgs(TwiceError):
    """The args are not a JSON object or do not fit the kind's fields (TW003)."""

    sqlstate = "TW003"


class SensitiveArgs(TwiceError):
    """An args key looks like a secret or personal data (TW004)."""

    sqlstate = "TW004"


class ArgsTooLarge(TwiceError):
    """The args are over the size limit (TW005)."""

    sqlstate = "TW005"


class InvalidOpts(TwiceError):
    """An option is unknown or has a wrong value (TW006)."""

    sqlstate = "TW006"


class InvalidQueue(TwiceError):
    """The queue name breaks the naming rule (TW007)."""

    sqlstate = "TW007"


class InvalidKey(TwiceError):
    """The unique key or a metadata entry is malformed (TW008)."""

    sqlstate = "TW008"


_BY_SQLSTATE = {
    cls.sqlstate: cls
    for cls in (InvalidKind, UnknownKind, InvalidArgs, SensitiveArgs, ArgsTooLarge, InvalidOpts, InvalidQueue, InvalidKey)
}


def _opts(
    queue: Optional[str],
    run_at: Optional[datetime],
    delay: Optional[float],
    priority: Optional[int],
    max_attempts: Optional[int],
    unique_key: Optional[str],
    metadata: Optional[Mapping[str, str]],
    force: bool,
) -> dict:
    opts: dict[str, Any] = {}
    if queue is not None:
        opts["queue"] = queue
    if run_at is not None:
        if run_at.tzinfo is None:
            raise InvalidOpts("run_at has no time zone: pass an aware datetime, such as datetime.now(timezone.utc)")
        opts["run_at"] = run_at.isoformat()
    if delay is not None:
        opts["delay"] = delay
    if priority is not None:
        opts["priority"] = priority
    if max_attempts is not None:
        opts["max_attempts"] = max_attempts
    if unique_key is not None:
        opts["unique_key"] = unique_key
    if metadata:
        opts["metadata"] = dict(metadata)
    if force:
        opts["force"] = True
    return opts


def enqueue(
    conn: Any,
    kind: str,
    args: Mapping[str, Any],
    *,
    queue: Optional[str] = None,
    run_at: Optional[datetime] = None,
    delay: Optional[float] = None,
    priority: Optional[int] = None,
    max_attempts: Optional[int] = None,
    unique_key: Optional[str] = None,
    metadata: Optional[Mapping[str, str]] = None,
    force: bool = False,
) -> int:
    """Enqueue one job in conn's current transaction and return its id.

    conn is a psycopg 3 Connection or Cursor on the database (and schema,
    through its search_path) the workers use. The job is stored only if the
    transaction commits; the workers are woken then. For a unique_key a job
    of the kind already holds, the id is that job's and no second job is
    stored. delay is in seconds and excludes run_at.

    A refusal raises a TwiceError subclass and, like any database error,
    aborts the transaction: wrap the call in conn.transaction() (a
    savepoint) to go on after catching it.
    """
    import psycopg  # only this path needs the driver

    if kind is None or args is None:
        raise InvalidArgs("kind and args are required: pass a kind name and a dict of args")
    payload = json.dumps(dict(args), separators=(",", ":"), ensure_ascii=False)
    opts = json.dumps(_opts(queue, run_at, delay, priority, max_attempts, unique_key, metadata, force))
    cur = conn.cursor() if hasattr(conn, "cursor") else conn
    try:
        cur.execute("SELECT twice_enqueue(%s, %s::jsonb, %s::jsonb)", (kind, payload, opts))
    except psycopg.Error as e:
        cls = _BY_SQLSTATE.get(e.sqlstate or "")
        if cls is None:
            raise
        detail = e.diag.message_primary or str(e)
        raise cls(detail, e.sqlstate) from e
    row = cur.fetchone()
    return int(row[0])


class APIError(TwiceError):
    """A refusal of the JSON API: status is the HTTP status, problem the
    application/problem+json body (title, detail, type)."""

    def __init__(self, status: int, problem: Mapping[str, Any]):
        detail = problem.get("detail") or problem.get("title") or f"HTTP {status}"
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.problem = dict(problem)


class HTTPClient:
    """A client of the JSON API a twiceweb dashboard serves under /api/v1.

    base_url is where the dashboard is mounted (https://app.example/admin/jobs);
    token is one of its Options.APITokens.
    """

    def __init__(self, base_url: str, token: str, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _request(self, method: str, path: str, body: Any = None, headers: Optional[Mapping[str, str]] = None) -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + "/api/v1" + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                problem = json.loads(raw)
            except ValueError:
                problem = {"detail": raw.decode(errors="replace")}
            raise APIError(e.code, problem) from None

    def enqueue(
        self,
        kind: str,
        args: Mapping[str, Any],
        *,
        idempotency_key: Optional[str] = None,
        queue: Optional[str] = None,
        run_at: Optional[datetime] = None,
        delay: Optional[float] = None,
        unique_key: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        force: bool = False,
    ) -> dict:
        """Enqueue one job and return the API's job object (id, state, kind,
        queue, run_at, duplicate).

        With idempotency_key, a retry of the same request returns the same
        job, never a second one; the same key with other args is refused
        (APIError, status 422). delay is in seconds and excludes run_at.
        force stores a kind no registry, catalog or live worker knows
        (without it, APIError 422 unknown-kind).
        """
        body: dict[str, Any] = {"kind": kind, "args": dict(args)}
        if queue is not None:
            body["queue"] = queue
        if run_at is not None:
            if run_at.tzinfo is None:
                raise InvalidOpts("run_at has no time zone: pass an aware datetime")
            body["run_at"] = run_at.isoformat()
        if delay is not None:
            body["delay"] = f"{float(delay):f}s"  # the API takes a Go duration
        if unique_key is not None:
            body["unique_key"] = unique_key
        if metadata:
            body["metadata"] = dict(metadata)
        if force:
            body["force"] = True
        headers = {}
        if idempotency_key is not None:
            # A structured-field string, as the Idempotency-Key draft asks.
            headers["Idempotency-Key"] = json.dumps(idempotency_key)
        _, job = self._request("POST", "/jobs", body, headers)
        return job

    def job(self, job_id: int) -> dict:
        """Return the API's view of job job_id."""
        _, job = self._request("GET", f"/jobs/{int(job_id)}")
        return job
