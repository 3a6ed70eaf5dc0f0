//! The seeds' experiments, each run through the real service, desktop loop and MCP endpoint on
//! virtual time. Every figure comes from timestamps the code recorded, never from constants.

use std::time::Duration;

use serde_json::{Value, json};

use super::ScenarioError;
use super::rng::Rng;
use super::stats::Summary;
use super::world::{CallError, World, WorldOptions};
use relay_protocol::clock::Timestamp;
use relay_protocol::{CompletionStatus, MAX_RESULT_CHARS, RunStatus, json_utf16_len};

/// Median graph run time (the seed's model).
pub const RUN_MEDIAN_S: f64 = 60.0;
/// Shortest graph run (the seed's model).
pub const RUN_MIN_S: f64 = 5.0;
/// Lognormal shape: calibrated so a client polling every 2 s makes ~47 calls per run, as the
/// seed measured (the seed states the median and minimum only).
pub const RUN_SIGMA: f64 = 0.8;
/// The longest any scenario waits for one run, in virtual time.
const RUN_LIMIT: Duration = Duration::from_secs(6 * 3600);

/// One scenario's outcome: the JSON object and readable lines with the seed's figures beside.
pub struct Report {
    /// One JSON object.
    pub json: Value,
    /// Lines for people.
    pub lines: Vec<String>,
}

fn secs(from: Timestamp, to: Timestamp) -> f64 {
    (to.unix_millis() - from.unix_millis()) as f64 / 1000.0
}

fn run_time(rng: &mut Rng) -> Duration {
    Duration::from_secs_f64(rng.lognormal(RUN_MEDIAN_S, RUN_SIGMA, RUN_MIN_S))
}

async fn phase(rng: &mut Rng) {
    let interval = relay_desktop::DEFAULT_POLL_INTERVAL.as_secs_f64();
    tokio::time::sleep(Duration::from_secs_f64(rng.uniform(0.0, interval))).await;
}

fn mode(options: WorldOptions) -> &'static str {
    if options.long_poll {
        "longpoll"
    } else {
        "poll"
    }
}

fn fmt(s: &Summary) -> String {
    format!(
        "mean {:.1} s, median {:.1} s, p95 {:.1} s, max {:.1} s",
        s.mean, s.p50, s.p95, s.max
    )
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// queued → started, for `n` runs one after another, each at a random phase.
pub async fn pickup(
    options: WorldOptions,
    n: usize,
    rng: &mut Rng,
) -> Result<Report, ScenarioError> {
    let world = World::new(options, rng).await?;
    let mut waits = Vec::with_capacity(n);
    for i in 0..n {
        phase(rng).await;
        let id = world
            .queue(run_time(rng), &format!("pickup-{i:06}"))
            .await
            .map_err(|e| format!("{e:?}"))?;
        let view = world
            .wait_terminal(&id, RUN_LIMIT)
            .await
            .map_err(|e| format!("run {i} ({id}): {e}"))?;
        let started = view.started_at.ok_or("a run never started")?;
        waits.push(secs(view.created_at, started));
    }
    world.stop().await;
    let summary = Summary::of(&waits);
    let mut json = json!({"scenario": "pickup", "mode": mode(options)});
    merge(&mut json, summary.seconds_json());
    Ok(Report {
        json,
        lines: vec![
            format!("pickup wait (queued → started), n={n}: {}", fmt(&summary)),
            "  seed (poll, n=2000): mean 9.8 s, median 9.8 s, p95 18.9 s, max 20.0 s".into(),
        ],
    })
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

/// Five runs queued at once finish one after another.
pub async fn serial(options: WorldOptions, rng: &mut Rng) -> Result<Report, ScenarioError> {
    let world = World::new(options, rng).await?;
    let queued_at = world.now();
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            world
                .queue(run_time(rng), &format!("serial-{i}"))
                .await
                .map_err(|e| format!("{e:?}"))?,
        );
    }
    let mut spans = Vec::new();
    for id in &ids {
        let view = world.wait_terminal(id, RUN_LIMIT).await?;
        let started = view.started_at.ok_or("never started")?;
        let finished = view.finished_at.ok_or("never finished")?;
        spans.push((secs(queued_at, started), secs(queued_at, finished)));
    }
    world.stop().await;
    let overlapping = spans.windows(2).any(|w| w[1].0 < w[0].1);
    let finished: Vec<f64> = spans.iter().map(|s| (s.1 * 10.0).round() / 10.0).collect();
    Ok(Report {
        json: json!({"scenario": "serial", "mode": mode(options), "n": 5,
                     "finished_s": finished, "overlapping": overlapping,
                     "started_s": spans.iter().map(|s| (s.0 * 10.0).round() / 10.0).collect::<Vec<_>>()}),
        lines: vec![
            format!(
                "five runs queued at once finished at {} s after queueing; overlapping: {overlapping}",
                finished
                    .iter()
                    .map(|f| format!("{f:.1}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "  seed: they complete one after another (serial relay)".into(),
        ],
    })
}

/// How a client looks for the result.
#[derive(Debug, Clone, Copy)]
enum Strategy {
    Fixed(f64),
    Backoff { first: f64, cap: f64 },
    WaitThenFixed { first: f64, every: f64 },
    Waiting,
}

impl Strategy {
    fn name(self) -> String {
        match self {
            Strategy::Fixed(p) => format!("fixed {p:.0} s"),
            Strategy::Backoff { cap, .. } => format!("exponential backoff to {cap:.0} s"),
            Strategy::WaitThenFixed { first, every } => {
                format!("wait {first:.0} s, then every {every:.0} s")
            }
            Strategy::Waiting => "get_graph_run waiting up to 45 s".into(),
        }
    }
}

/// Client polling strategies: tool calls per run and how late the result is noticed.
pub async fn polling(
    options: WorldOptions,
    n: usize,
    rng: &mut Rng,
) -> Result<Report, ScenarioError> {
    let mut strategies = vec![
        Strategy::Fixed(2.0),
        Strategy::Fixed(15.0),
        Strategy::Backoff {
            first: 1.0,
            cap: 30.0,
        },
        Strategy::WaitThenFixed {
            first: 20.0,
            every: 15.0,
        },
    ];
    if options.long_poll {
        strategies.push(Strategy::Waiting);
    }
    let mut rows = Vec::new();
    let mut lines = vec![format!("client polling, {n} runs per strategy:")];
    for strategy in strategies {
        let world = World::new(options, rng).await?;
        let mut calls = Vec::with_capacity(n);
        let mut notice = Vec::with_capacity(n);
        for i in 0..n {
            phase(rng).await;
            let id = world
                .queue(run_time(rng), &format!("polling-{i:06}"))
                .await
                .map_err(|e| format!("{e:?}"))?;
            let (count, seen_at) = poll_until_done(&world, &id, strategy).await?;
            let view = world.view(&id).await?;
            let finished = view.finished_at.ok_or("never finished")?;
            calls.push(count as f64);
            notice.push(secs(finished, seen_at).max(0.0));
        }
        world.stop().await;
        let (calls, notice) = (Summary::of(&calls), Summary::of(&notice));
        lines.push(format!(
            "  {:<38} {:>5.1} calls per run (median {:.0}), result noticed {:.1} s late on average (p95 {:.1} s)",
            strategy.name(),
            calls.mean,
            calls.p50,
            notice.mean,
            notice.p95
        ));
        let mut row =
            json!({"strategy": strategy.name(), "calls_mean": calls.mean, "calls_p50": calls.p50});
        merge(&mut row, json!({"notice": notice.seconds_json()}));
        rows.push(row);
    }
    lines.push("  seed: every 2 s ~47 calls; backoff as many calls as fixed 15 s and noticed twice as late; waiting one interval first, then fixed, is best".into());
    Ok(Report {
        json: json!({"scenario": "polling", "mode": mode(options), "n": n, "strategies": rows}),
        lines,
    })
}

async fn poll_until_done(
    world: &World,
    id: &str,
    strategy: Strategy,
) -> Result<(u64, Timestamp), ScenarioError> {
    let mut calls = 0u64;
    let mut delay = match strategy {
        Strategy::Fixed(p) => p,
        Strategy::Backoff { first, .. } => first,
        Strategy::WaitThenFixed { first, .. } => first,
        Strategy::Waiting => 0.0,
    };
    let deadline = tokio::time::Instant::now() + RUN_LIMIT;
    loop {
        tokio::time::sleep(Duration::from_secs_f64(delay)).await;
        let arguments = match strategy {
            Strategy::Waiting => json!({"command_id": id, "wait_seconds": 45}),
            _ => json!({"command_id": id}),
        };
        calls += 1;
        let run = world
            .client
            .call("get_graph_run", arguments)
            .await
            .map_err(|e| format!("{e:?}"))?;
        if matches!(
            run["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            return Ok((calls, world.now()));
        }
        if tokio::time::Instant::now() > deadline {
            return Err("a polled run never finished".into());
        }
        delay = match strategy {
            Strategy::Fixed(p) => p,
            Strategy::Backoff { cap, .. } => (delay * 2.0).min(cap),
            Strategy::WaitThenFixed { every, .. } => every,
            Strategy::Waiting => 0.0,
        };
    }
}

/// Cancels at a random 0–40 s after queueing: queued runs end at once, running ones when the
/// desktop sees the flag.
pub async fn cancel(
    options: WorldOptions,
    n: usize,
    rng: &mut Rng,
) -> Result<Report, ScenarioError> {
    let world = World::new(options, rng).await?;
    let (mut queued, mut running, mut finished_first) = (Vec::new(), Vec::new(), 0usize);
    for i in 0..n {
        phase(rng).await;
        let id = world
            .queue(run_time(rng), &format!("cancel-{i:06}"))
            .await
            .map_err(|e| format!("{e:?}"))?;
        tokio::time::sleep(Duration::from_secs_f64(rng.uniform(0.0, 40.0))).await;
        let cancelled_at = world.now();
        let answer = world
            .client
            .call("cancel_graph_run", json!({"command_id": id}))
            .await
            .map_err(|e| format!("{e:?}"))?;
        let view = world.wait_terminal(&id, RUN_LIMIT).await?;
        let finished = view.finished_at.ok_or("never finished")?;
        if answer["already_finished"] == true {
            finished_first += 1;
        } else if view.started_at.is_none() {
            queued.push(secs(cancelled_at, finished).max(0.0));
        } else {
            running.push(secs(cancelled_at, finished).max(0.0));
        }
    }
    world.stop().await;
    let (q, r) = (Summary::of(&queued), Summary::of(&running));
    let mut json = json!({"scenario": "cancel", "mode": mode(options), "n": n, "finished_before_cancel": finished_first});
    merge(
        &mut json,
        json!({"queued": q.seconds_json(), "running": r.seconds_json()}),
    );
    Ok(Report {
        json,
        lines: vec![
            format!("cancel at a random 0–40 s after queueing, n={n}: still queued {}, running {}, already finished {finished_first}", q.n, r.n),
            format!("  queued:  terminal after {}", fmt(&q)),
            format!("  running: terminal after {}", fmt(&r)),
            "  seed (poll, n=2000): queued 523 → 0.0 s; running 1370 → mean 2.0 s, p95 3.3 s, max 3.5 s".into(),
        ],
    })
}

/// 200 runs with 30 % of answers lost, with a fresh key per attempt and with one key per run.
pub async fn idempotency(
    options: WorldOptions,
    runs: usize,
    rng: &mut Rng,
) -> Result<Report, ScenarioError> {
    let mut rows = Vec::new();
    let mut lines = vec![format!(
        "{runs} runs, 30 % of answers lost, the client retries until it hears back:"
    )];
    for (label, same_key) in [
        ("without a key (a fresh one each attempt)", false),
        ("with an idempotency key", true),
    ] {
        let world = World::new(options, rng).await?;
        // The desktop stays offline: the runs only need to be queued to be counted.
        world
            .desktop_faults
            .offline
            .store(true, std::sync::atomic::Ordering::SeqCst);
        world
            .client_faults
            .lose_answers_ppm
            .store(300_000, std::sync::atomic::Ordering::SeqCst);
        let mut attempts = 0u64;
        for i in 0..runs {
            let mut attempt = 0;
            loop {
                attempt += 1;
                attempts += 1;
                let key = if same_key {
                    format!("idem-{i:06}")
                } else {
                    format!("idem-{i:06}-{attempt}")
                };
                match world.queue(Duration::from_secs(60), &key).await {
                    Ok(_) => break,
                    Err(CallError::Lost(_)) if attempt < 100 => continue,
                    Err(e) => return Err(format!("{e:?}").into()),
                }
            }
        }
        let queued = world
            .app
            .store
            .queued_commands(&world.project, usize::MAX)
            .await
            .map_err(err)?
            .rows
            .len();
        world.stop().await;
        let duplicates = queued.saturating_sub(runs);
        lines.push(format!(
            "  {label:<42} {attempts} calls, {queued} runs queued: {duplicates} duplicates"
        ));
        rows.push(json!({"key": same_key, "calls": attempts, "runs_queued": queued, "duplicates": duplicates}));
    }
    lines.push("  seed: duplicates without a key, none with one".into());
    let duplicates_without = rows[0]["duplicates"].clone();
    let duplicates_with = rows[1]["duplicates"].clone();
    Ok(Report {
        json: json!({"scenario": "idempotency", "mode": mode(options), "n": runs,
                     "duplicates_without_key": duplicates_without, "duplicates_with_key": duplicates_with, "variants": rows}),
        lines,
    })
}

/// The desktop is offline for 600 s while five runs queue; then it comes back.
pub async fn offline(options: WorldOptions, rng: &mut Rng) -> Result<Report, ScenarioError> {
    let world = World::new(options, rng).await?;
    let faults = world.desktop_faults.clone();
    faults
        .offline
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            world
                .queue(run_time(rng), &format!("offline-{i}"))
                .await
                .map_err(|e| format!("{e:?}"))?,
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(600)).await;
    let mut statuses = Vec::new();
    for id in &ids {
        statuses.push(world.view(id).await?.status);
    }
    let executed_offline = world.engine.executions();
    let back = world.now();
    faults
        .offline
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let (mut first_start, mut last_finish) = (f64::MAX, 0.0f64);
    let mut after = Vec::new();
    for id in &ids {
        let view = world.wait_terminal(id, RUN_LIMIT).await?;
        first_start = first_start.min(secs(back, view.started_at.ok_or("never started")?));
        last_finish = last_finish.max(secs(back, view.finished_at.ok_or("never finished")?));
        after.push(view.status);
    }
    let executed = world.engine.executions();
    world.stop().await;
    let all_queued = statuses.iter().all(|s| *s == RunStatus::Queued);
    let all_completed = after.iter().all(|s| *s == RunStatus::Completed);
    Ok(Report {
        json: json!({"scenario": "offline", "mode": mode(options), "n": 5, "all_queued_while_offline": all_queued,
                     "executed_while_offline": executed_offline, "first_start_after_return_s": first_start,
                     "all_completed": all_completed, "all_completed_after_return_s": last_finish, "executed": executed}),
        lines: vec![
            format!("desktop offline 600 s: statuses {statuses:?}, executed {executed_offline}"),
            format!("  back online: first start +{first_start:.1} s, all 5 {after:?} by +{last_finish:.1} s, executed {executed}"),
            "  seed: offline all queued, executed 0; back online first start +3 s, all 5 completed by +131 s".into(),
        ],
    })
}

/// The completion post is lost once, with the outbox on and off.
pub async fn outbox(options: WorldOptions, rng: &mut Rng) -> Result<Report, ScenarioError> {
    let mut rows = Vec::new();
    let mut lines = Vec::new();
    for with_outbox in [true, false] {
        let world = World::new(
            WorldOptions {
                outbox: with_outbox,
                ..options
            },
            rng,
        )
        .await?;
        world
            .desktop_faults
            .lose_completions
            .store(1, std::sync::atomic::Ordering::SeqCst);
        let id = world
            .queue(Duration::from_secs(30), "outbox-1")
            .await
            .map_err(|e| format!("{e:?}"))?;
        // Well past one pass interval after the run, well short of the 30 min silence timeout.
        let view = world.wait_terminal(&id, Duration::from_secs(600)).await?;
        world.stop().await;
        let started = view.started_at.ok_or("never started")?;
        let delivered = view.finished_at.map(|f| secs(started, f));
        lines.push(match delivered {
            Some(after) => format!(
                "completion post lost once, outbox={}: status {}, delivered {after:.1} s after start",
                if with_outbox { "on " } else { "off" },
                view.status
            ),
            None => format!(
                "completion post lost once, outbox={}: status {} ten minutes later, never delivered",
                if with_outbox { "on " } else { "off" },
                view.status
            ),
        });
        rows.push(json!({"outbox": with_outbox, "status": view.status, "delivered_after_start_s": delivered}));
    }
    lines.push(
        "  seed: outbox on: completed, delivered 40 s after start; off: running, never delivered"
            .into(),
    );
    Ok(Report {
        json: json!({"scenario": "outbox", "mode": mode(options), "variants": rows}),
        lines,
    })
}

/// ASCII and Japanese results at the 100,000-character limit and one past it.
pub async fn result_size(options: WorldOptions, rng: &mut Rng) -> Result<Report, ScenarioError> {
    let world = World::new(options, rng).await?;
    // The completion's JSON besides the text: execution ids are UUIDs (36 characters).
    let empty = relay_desktop::bounding::completion(
        "00000000-0000-0000-0000-000000000000",
        CompletionStatus::Completed,
        Some(Value::String(String::new())),
        super::engine::SIM_TOKENS,
        0.0,
        None,
    );
    let fits = MAX_RESULT_CHARS - json_utf16_len(&empty.bounded_view());
    let mut rows = Vec::new();
    let mut lines = Vec::new();
    for (alphabet, unit) in [("ascii", "a"), ("japanese", "日")] {
        for count in [fits, fits + 1] {
            let key = format!("size-{alphabet}-{count}");
            let arguments =
                json!({"duration_ms": 5000, "result_unit": unit, "result_count": count});
            let ticket = world
                .client
                .call(
                    "run_graph_session",
                    json!({"graph_session_id": world.session.as_str(), "arguments": arguments, "idempotency_key": key}),
                )
                .await
                .map_err(|e| format!("{e:?}"))?;
            let id = ticket["command_id"]
                .as_str()
                .ok_or("no command id")?
                .to_owned();
            world.wait_terminal(&id, RUN_LIMIT).await?;
            let run = world
                .client
                .call("get_graph_run", json!({"command_id": id}))
                .await
                .map_err(|e| format!("{e:?}"))?;
            let text = run["result"].as_str().unwrap_or("");
            let truncated = run["result_truncated"] == true;
            lines.push(format!(
                "result of {count} {alphabet} characters: {}",
                if truncated {
                    "result_truncated: true (nothing of it posted; the full result is in the desktop's history)".to_owned()
                } else {
                    format!("fits: {} chars = {} UTF-8 bytes", text.chars().count(), text.len())
                }
            ));
            rows.push(json!({"alphabet": alphabet, "chars": count, "truncated": truncated, "utf8_bytes": text.len()}));
        }
    }
    world.stop().await;
    lines.push("  seed: 99,899 chars fit = 99,899 bytes (ascii) = 299,697 bytes (japanese)".into());
    Ok(Report {
        json: json!({"scenario": "result-size", "mode": mode(options), "limit": MAX_RESULT_CHARS, "fits_chars": fits, "results": rows}),
        lines,
    })
}

/// Another connected agent reads the run.
pub async fn access(options: WorldOptions, rng: &mut Rng) -> Result<Report, ScenarioError> {
    let world = World::new(options, rng).await?;
    let id = world
        .queue(Duration::from_secs(10), "access-1")
        .await
        .map_err(|e| format!("{e:?}"))?;
    let theirs = world
        .other_client
        .call("get_graph_run", json!({"command_id": id}))
        .await;
    let unknown = world
        .other_client
        .call(
            "get_graph_run",
            json!({"command_id": relay_protocol::CommandId::new_random().to_string()}),
        )
        .await;
    world.stop().await;
    let text = |r: &Result<Value, CallError>| match r {
        Err(CallError::Tool(t)) => t.clone(),
        Ok(v) => format!("visible: {v}"),
        Err(CallError::Lost(l)) => l.clone(),
    };
    let (theirs, unknown) = (text(&theirs), text(&unknown));
    Ok(Report {
        json: json!({"scenario": "access", "mode": mode(options), "another_agent": theirs, "unknown_id": unknown, "identical": theirs == unknown}),
        lines: vec![
            format!("another agent reads the run: {theirs:?}; an unknown id: {unknown:?}"),
            "  seed: {'error': 'Graph run not found or access removed'}".into(),
        ],
    })
}
