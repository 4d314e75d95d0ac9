/**
 * @twicejobs/client: enqueue twice jobs from TypeScript.
 *
 * - `enqueue(db, kind, args, opts)` calls the database's `twice_enqueue` on a
 *   pg `Client`, `Pool` or `PoolClient`: inside your transaction the job
 *   commits with your own writes or not at all, and the workers are woken on
 *   commit.
 * - `HTTPClient` calls the JSON API a twiceweb dashboard serves under
 *   `/api/v1`, with an Idempotency-Key so a retried request never makes a
 *   second job.
 *
 * Both apply the rules of a Go enqueue (the kind's published fields, the
 * payload policy, the size cap, the queue and key rules); a refusal throws a
 * `TwiceError` subclass that says what to fix.
 */

/** Anything with pg's `query`: a `Client`, a `Pool` or a `PoolClient`. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: Array<Record<string, unknown>> }>;
}

/** Options of an enqueue; each unset one takes the kind's or twice's default. */
export interface EnqueueOptions {
  /** The queue; defaults to the kind's published queue, else "default". */
  queue?: string;
  /** When the job is due; not with `delay`. */
  runAt?: Date;
  /** Seconds from now until the job is due; not with `runAt`. */
  delay?: number;
  /** Lower runs first; defaults to 0. */
  priority?: number;
  /** Attempts before the job is dead-lettered; defaults to the kind's, else 20. */
  maxAttempts?: number;
  /** A job of the kind holding this key (waiting or running) is returned instead of a second one. */
  uniqueKey?: string;
  /** Strings carried to the handler with the job. */
  metadata?: Record<string, string>;
  /** Store a kind no worker published to the catalog (SQL path only). */
  force?: boolean;
}

/** A refused enqueue. `sqlstate` is the database's code (class TW) on the SQL path. */
export class TwiceError extends Error {
  readonly sqlstate?: string;
  constructor(message: string, sqlstate?: string) {
    super(message);
    this.name = new.target.name;
    this.sqlstate = sqlstate;
  }
}
/** The kind is missing or malformed (TW001). */
export class InvalidKind extends TwiceError {}
/** No worker published the kind to the catalog (TW002); pass `force` to store it anyway. */
export class UnknownKind extends TwiceError {}
/** The args are not an object or do not fit the kind's fields (TW003). */
export class InvalidArgs extends TwiceError {}
/** An args key looks like a secret or personal data (TW004). */
export class SensitiveArgs extends TwiceError {}
/** The args are over the size limit (TW005). */
export class ArgsTooLarge extends TwiceError {}
/** An option is unknown or has a wrong value (TW006). */
export class InvalidOpts extends TwiceError {}
/** The queue name breaks the naming rule (TW007). */
export class InvalidQueue extends TwiceError {}
/** The unique key or a metadata entry is malformed (TW008). */
export class InvalidKey extends TwiceError {}

const bySQLState: Record<string, new (message: string, sqlstate?: string) => TwiceError> = {
  TW001: InvalidKind,
  TW002: UnknownKind,
  TW003: InvalidArgs,
  TW004: SensitiveArgs,
  TW005: ArgsTooLarge,
  TW006: InvalidOpts,
  TW007: InvalidQueue,
  TW008: InvalidKey,
};

function sqlOpts(o: EnqueueOptions): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (o.queue !== undefined) out.queue = o.queue;
  if (o.runAt !== undefined) out.run_at = o.runAt.toISOString();
  if (o.delay !== undefined) out.delay = o.delay;
  if (o.priority !== undefined) out.priority = o.priority;
  if (o.maxAttempts !== undefined) out.max_attempts = o.maxAttempts;
  if (o.uniqueKey !== undefined) out.unique_key = o.uniqueKey;
  if (o.metadata !== undefined) out.metadata = o.metadata;
  if (o.force) out.force = true;
  return out;
}

/**
 * Enqueues one job on `db` and returns its id (a string: ids are bigints).
 * Inside a transaction (BEGIN … COMMIT on a `PoolClient`) the job is stored
 * only if it commits. A refusal throws a `TwiceError` subclass and, like any
 * database error, aborts the transaction: wrap the call in a SAVEPOINT to go
 * on after catching it.
 */
export async function enqueue(db: Queryable, kind: string, args: Record<string, unknown>, opts: EnqueueOptions = {}): Promise<string> {
  if (typeof kind !== "string" || args === null || typeof args !== "object" || Array.isArray(args)) {
    throw new InvalidArgs("kind must be a string and args an object, such as {user_id: 42}");
  }
  try {
    const res = await db.query("SELECT twice_enqueue($1, $2::jsonb, $3::jsonb)::text AS id", [
      kind,
      JSON.stringify(args),
      JSON.stringify(sqlOpts(opts)),
    ]);
    return String(res.rows[0].id);
  } catch (e) {
    const code = (e as { code?: string }).code;
    const cls = code ? bySQLState[code] : undefined;
    if (cls) throw new cls((e as Error).message, code);
    throw e;
  }
}

/** A refusal of the JSON API: the HTTP status and its problem+json body. */
export class APIError extends TwiceError {
  readonly status: number;
  readonly problem: Record<string, unknown>;
  constructor(status: number, problem: Record<string, unknown>) {
    super(`${status}: ${String(problem.detail ?? problem.title ?? "HTTP " + status)}`);
    this.status = status;
    this.problem = problem;
  }
}

/** A job as the JSON API returns it. */
export interface APIJob {
  id: number;
  state: string;
  kind: string;
  queue: string;
  run_at: string;
  duplicate?: boolean;
  [key: string]: unknown;
}

/** A client of the JSON API a twiceweb dashboard serves under /api/v1. */
export class HTTPClient {
  private readonly base: string;
  /** `baseURL` is where the dashboard is mounted; `token` one of its APITokens. */
  constructor(baseURL: string, private readonly token: string) {
    this.base = baseURL.replace(/\/+$/, "") + "/api/v1";
  }

  private async request(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<APIJob> {
    const res = await fetch(this.base + path, {
      method,
      headers: {
        Authorization: "Bearer " + this.token,
        Accept: "application/json",
        ...(body === undefined ? {} : { "Content-Type": "application/json" }),
        ...headers,
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let parsed: Record<string, unknown> = {};
    try {
      parsed = text ? JSON.parse(text) : {};
    } catch {
      parsed = { detail: text };
    }
    if (!res.ok) throw new APIError(res.status, parsed);
    return parsed as APIJob;
  }

  /**
   * Enqueues one job. With `idempotencyKey`, a retry of the same request
   * returns the same job, never a second one; the same key with other args
   * is refused (APIError, status 422).
   */
  async enqueue(
    kind: string,
    args: Record<string, unknown>,
    opts: {
      idempotencyKey?: string;
      queue?: string;
      runAt?: Date;
      /** Seconds from now until the job is due; not with `runAt`. */
      delay?: number;
      uniqueKey?: string;
      metadata?: Record<string, string>;
      /** Store a kind no registry, catalog or live worker knows (else APIError 422 unknown-kind). */
      force?: boolean;
    } = {},
  ): Promise<APIJob> {
    const body: Record<string, unknown> = { kind, args };
    if (opts.queue !== undefined) body.queue = opts.queue;
    if (opts.runAt !== undefined) body.run_at = opts.runAt.toISOString();
    if (opts.delay !== undefined) body.delay = opts.delay + "s"; // the API takes a Go duration
    if (opts.force) body.force = true;
    if (opts.uniqueKey !== undefined) body.unique_key = opts.uniqueKey;
    if (opts.metadata !== undefined) body.metadata = opts.metadata;
    // A structured-field string, as the Idempotency-Key draft asks.
    const headers: Record<string, string> = opts.idempotencyKey === undefined ? {} : { "Idempotency-Key": JSON.stringify(opts.idempotencyKey) };
    return this.request("POST", "/jobs", body, headers);
  }

  /** Returns the API's view of a job. */
  async job(id: number | string): Promise<APIJob> {
    return this.request("GET", "/jobs/" + encodeURIComponent(String(id)));
  }
}
