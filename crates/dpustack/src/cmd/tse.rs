//! Task Scheduler Engine tools (issue #6): `tse-demo` and `bench tse` (the TSE's
//! line in `dpustack up` is the node's: `node::tse_self_check`).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use benchkit::{black_box, median, Better, Figure, Report};
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use tse::demo::{echo, LoopbackNet};
use tse::{call, EventQueue, Scheduler, TaskError, TaskId, TaskResult, Wait};

use crate::cmd::bench::BenchArgs;
use crate::config::Config;
#[cfg(test)]
use node::tse_self_check as self_check;

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Run a demo DAG of tasks on the TSE and print the order they ran in.
    TseDemo(DemoArgs),
}

/// A task of the demo DAG.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoTask {
    Open,
    FetchA,
    FetchB,
    Merge,
    Retry,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Make this task fail (code -5); its dependents get the error.
    #[arg(long, value_enum)]
    pub fail: Option<DemoTask>,
    /// Delay before `open` runs, in milliseconds.
    #[arg(long, default_value_t = 2)]
    pub delay_ms: u64,
    /// Latency of the loopback "network" answering `fetch-b`, in microseconds.
    #[arg(long, default_value_t = 500)]
    pub net_latency_us: u64,
    /// Print the trace as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: Cmd, _cfg: &Config) -> Result<()> {
    match cmd {
        Cmd::TseDemo(a) => demo(&a).map(|_| ()),
    }
}

#[derive(Debug, Clone, Serialize)]
struct Step {
    t_us: f64,
    task: &'static str,
    what: &'static str,
    result: Option<String>,
}

fn show(r: &TaskResult) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => format!("error: {e}"),
    }
}

/// Runs and prints the demo; returns the result of `report`'s event and the trace.
fn demo(a: &DemoArgs) -> Result<(TaskResult, Vec<Step>)> {
    let net = LoopbackNet::new(Duration::from_micros(a.net_latency_us));
    let mut eq = EventQueue::with_poller(Scheduler::new(), Box::new(net.clone()));
    let trace: Rc<RefCell<Vec<Step>>> = Default::default();
    let t0 = eq.sched().now();
    let fail = a.fail;
    let outcome = move |who: DemoTask| -> TaskResult {
        if fail == Some(who) {
            Err(TaskError::Code(-5))
        } else {
            Ok(())
        }
    };
    let log = {
        let trace = trace.clone();
        move |s: &Scheduler, task: &'static str, what: &'static str, r: Option<TaskResult>| {
            trace.borrow_mut().push(Step {
                t_us: s.now().since(t0).as_secs_f64() * 1e6,
                task,
                what,
                result: r.as_ref().map(show),
            })
        }
    };
    // a task whose body completes it at once with the planned outcome
    let inline = |s: &mut Scheduler, name: &'static str, who: DemoTask| -> TaskId {
        let log = log.clone();
        s.create(move |s, id| {
            log(s, name, "run", None);
            let _ = s.complete(id, outcome(who));
        })
    };
    let traced = |s: &mut Scheduler, id: TaskId, name: &'static str| -> Result<()> {
        let log = log.clone();
        s.register_comp_cb(id, move |s, _, r| {
            log(s, name, "done", Some(r));
            r
        })?;
        Ok(())
    };

    let s = eq.sched_mut();
    let open = inline(s, "open", DemoTask::Open);
    let fetch_a = inline(s, "fetch-a", DemoTask::FetchA);
    // fetch-b waits on the network: its body sends and returns; the poller completes it
    let fetch_b = {
        let (log, net) = (log.clone(), net.clone());
        let out = Rc::new(Cell::new(None));
        s.create(move |s, id| {
            log(s, "fetch-b", "run (sent, completes later)", None);
            net.send(
                s.now(),
                id,
                tse::demo::Request {
                    value: 42,
                    fail: outcome(DemoTask::FetchB).err().map(|_| -5),
                    out: out.clone(),
                },
            );
        })
    };
    let merge = inline(s, "merge", DemoTask::Merge);
    // retry: fails on its first run; a completion callback re-runs it after 1 ms
    let retry = {
        let log = log.clone();
        let runs = Rc::new(Cell::new(0u32));
        s.create(move |s, id| {
            runs.set(runs.get() + 1);
            log(s, "retry", "run", None);
            let r = if runs.get() == 1 {
                Err(TaskError::TimedOut)
            } else {
                outcome(DemoTask::Retry)
            };
            let _ = s.complete(id, r);
        })
    };
    traced(s, retry, "retry")?;
    s.register_comp_cb(retry, {
        let log = log.clone();
        move |s, id, r| {
            if r == Err(TaskError::TimedOut) {
                log(s, "retry", "re-init (+1 ms)", Some(r));
                // the callbacks registered before this one stay for the next run
                let _ = s.reinit_after(id, Duration::from_millis(1));
            }
            r
        }
    })?;
    // report runs even if a dependency failed, and shows the error it got
    let report = {
        let log = log.clone();
        s.create(move |s, id| {
            let dep = s.dep_error(id).ok().flatten();
            log(s, "report", "run", Some(dep.map_or(Ok(()), Err)));
            let _ = s.complete(id, dep.map_or(Ok(()), Err));
        })
    };
    s.set_propagate(report, false)?;
    for (id, name) in [
        (open, "open"),
        (fetch_a, "fetch-a"),
        (fetch_b, "fetch-b"),
        (merge, "merge"),
        (report, "report"),
    ] {
        traced(s, id, name)?;
    }
    s.register_deps(fetch_a, &[open])?;
    s.register_deps(fetch_b, &[open])?;
    s.register_deps(merge, &[fetch_a, fetch_b])?;
    s.register_deps(report, &[merge, retry])?;
    s.schedule_after(open, Duration::from_millis(a.delay_ms))?;
    for id in [fetch_a, fetch_b, merge, retry] {
        s.schedule(id)?;
    }
    // the last task carries the event the caller waits on
    let ev = eq.event_init(None)?;
    eq.launch_task(ev, report)?;
    let mut done = Vec::new();
    while done.is_empty() {
        eq.poll(Wait::Forever, 1, &mut done)?;
    }
    let dag_result = done[0].1;
    // the same example operation, blocking (no event) and non-blocking (event)
    let out = Rc::new(Cell::new(None));
    let blocking = echo(&mut eq, None, &net, 7, None, out.clone());
    let ev2 = eq.event_init(None)?;
    let out2 = Rc::new(Cell::new(None));
    echo(&mut eq, Some(&ev2), &net, 8, None, out2.clone())?;
    let nb = eq.test(ev2, Wait::Forever)?;
    let live = eq.sched().live();
    eq.event_fini(ev)?;
    eq.event_fini(ev2)?;
    eq.destroy(false)?;

    let trace = trace.borrow();
    if a.json {
        let j = serde_json::json!({
            "trace": *trace,
            "dag_result": show(&dag_result),
            "echo_blocking": { "result": blocking.as_ref().map_err(|e| e.to_string()).err(), "value": out.get() },
            "echo_event": { "result": nb.map(|r| show(&r)), "value": out2.get() },
            "live_tasks_after": live,
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        println!("DAG: open(+{} ms) -> {{fetch-a, fetch-b (network)}} -> merge; {{merge, retry}} -> report (runs despite failures)", a.delay_ms);
        for st in trace.iter() {
            println!(
                "  t={:>9.1} us  {:<8} {:<28} {}",
                st.t_us,
                st.task,
                st.what,
                st.result.as_deref().unwrap_or("")
            );
        }
        println!("event of `report` polled out: {}", show(&dag_result));
        match &blocking {
            Ok(()) => println!("echo(7), no event (blocking): ok, value {:?}", out.get()),
            Err(e) => println!("echo(7), no event (blocking): {e}"),
        }
        println!(
            "echo(8), with event (non-blocking, then test): {}, value {:?}",
            nb.map_or("in flight".into(), |r| show(&r)),
            out2.get()
        );
        println!("live tasks at the end: {live}");
    }
    if live != 0 {
        bail!("{live} task(s) leaked");
    }
    if blocking.is_err() || out.get() != Some(7) || nb != Some(Ok(())) || out2.get() != Some(8) {
        bail!(
            "echo failed: {blocking:?} {:?}, {nb:?} {:?}",
            out.get(),
            out2.get()
        );
    }
    Ok((dag_result, trace.clone()))
}

const BATCH: usize = 10_000;
const EQ_BATCH: usize = 64;

/// The same-run baseline, measured next to each figure (interleaved run by
/// run) so that load from other processes hits both alike.
struct Baseline {
    q: ClosureQueue,
    acc: u64,
    slice: Duration,
    /// Closures queued per batch.
    n: usize,
}

impl Baseline {
    /// ns per closure, over one slice.
    fn measure(&mut self) -> f64 {
        let (q, acc, n) = (&mut self.q, &mut self.acc, self.n);
        let (ops, el) = benchkit::run_for(self.slice, |_| closure_queue(q, acc, n));
        el.as_nanos() as f64 / ops.max(1) as f64
    }
}

/// (figure, baseline) in ns per item: `f` does some items per call and
/// returns how many; each run measures the baseline, then `f`; medians.
fn paired(args: &BenchArgs, base: &mut Baseline, mut f: impl FnMut() -> u64) -> (f64, f64) {
    let (mut v, mut b) = (Vec::new(), Vec::new());
    for _ in 0..args.runs() {
        b.push(base.measure());
        let (ops, el) = benchkit::run_for(args.run_time(), |_| f());
        v.push(el.as_nanos() as f64 / ops.max(1) as f64);
    }
    (
        median(&mut v).unwrap_or(f64::NAN),
        median(&mut b).unwrap_or(f64::NAN),
    )
}

/// The baseline's queue of closures.
type ClosureQueue = Vec<Box<dyn FnOnce(&mut u64)>>;

/// The baseline: run closures from a queue (Box<dyn FnOnce> + Vec push/pop).
fn closure_queue(q: &mut ClosureQueue, acc: &mut u64, n: usize) -> u64 {
    for i in 0..n {
        let x = black_box(i as u64);
        q.push(Box::new(move |a: &mut u64| *a = a.wrapping_add(x)));
    }
    while let Some(f) = q.pop() {
        f(acc);
    }
    black_box(*acc);
    n as u64
}

/// `n` tasks created and scheduled, then one `progress` runs them all.
fn task_batch(s: &mut Scheduler, n: usize) -> u64 {
    for i in 0..n {
        let x = black_box(i as u64);
        let id = s.create(move |s, id| {
            black_box(x);
            let _ = s.complete(id, Ok(()));
        });
        let _ = s.schedule(id);
    }
    s.progress();
    n as u64
}

fn chain_batch(s: &mut Scheduler) -> u64 {
    let mut prev: Option<TaskId> = None;
    for i in 0..BATCH {
        let x = black_box(i as u64);
        let id = s.create(move |s, id| {
            black_box(x);
            let _ = s.complete(id, Ok(()));
        });
        if let Some(p) = prev {
            let _ = s.register_deps(id, &[p]);
        }
        let _ = s.schedule(id);
        prev = Some(id);
    }
    s.progress();
    BATCH as u64
}

/// `dpustack bench tse`.
pub fn bench(args: &BenchArgs, _cfg: &Config) -> Result<benchkit::Report> {
    let mut r = Report::new("tse");
    let base_name = "closure queue (Box<dyn FnOnce> + Vec push/pop)";

    let mut small = Baseline {
        q: Vec::with_capacity(EQ_BATCH),
        acc: 0,
        slice: args.run_time() / 4,
        n: EQ_BATCH,
    };
    let mut base = Baseline {
        q: Vec::with_capacity(BATCH),
        acc: 0,
        slice: args.run_time() / 4,
        n: BATCH,
    };
    let base = &mut base;

    let mut s = Scheduler::new();
    let per_task = paired(args, base, || task_batch(&mut s, BATCH));
    let per_task_small = paired(args, &mut small, || task_batch(&mut s, EQ_BATCH));
    let chain = paired(args, base, || chain_batch(&mut s));
    if s.live() != 0 {
        bail!("bench leaked {} task(s)", s.live());
    }

    // EQ: event launch + task + poll, 64 events in flight
    let mut eq = EventQueue::new(Scheduler::new());
    let evs = (0..EQ_BATCH)
        .map(|_| eq.event_init(None))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = Vec::with_capacity(EQ_BATCH);
    let mut eq_err = None;
    let eq_round = paired(args, base, || {
        for ev in &evs {
            if let Err(e) = call(&mut eq, Some(ev), |s| {
                Ok(s.create(|s, id| {
                    let _ = s.complete(id, Ok(()));
                }))
            }) {
                eq_err = Some(e);
            }
        }
        out.clear();
        while out.len() < EQ_BATCH {
            match eq.poll(Wait::Forever, EQ_BATCH, &mut out) {
                Ok(_) => {}
                Err(e) => {
                    eq_err = Some(e.into());
                    break;
                }
            }
        }
        EQ_BATCH as u64
    });

    // EQ poll alone: events completed beforehand, only the poll is timed
    let (mut poll_v, mut poll_b) = (Vec::new(), Vec::new());
    for _ in 0..args.runs() {
        poll_b.push(base.measure());
        let (mut polled, mut spent) = (0u64, Duration::ZERO);
        let start = Instant::now();
        while start.elapsed() < args.run_time() {
            for ev in &evs {
                eq.launch(*ev)?;
                eq.complete_event(*ev, Ok(()))?;
            }
            out.clear();
            let t = Instant::now();
            while out.len() < EQ_BATCH {
                eq.poll(Wait::NoWait, EQ_BATCH, &mut out)?;
            }
            spent += t.elapsed();
            polled += EQ_BATCH as u64;
        }
        poll_v.push(spent.as_nanos() as f64 / polled.max(1) as f64);
    }
    let poll_only = (
        median(&mut poll_v).unwrap_or(f64::NAN),
        median(&mut poll_b).unwrap_or(f64::NAN),
    );

    // the blocking path (no event): one call at a time through the private event
    let blocking = paired(args, base, || {
        for _ in 0..EQ_BATCH {
            if let Err(e) = call(&mut eq, None, |s| {
                Ok(s.create(|s, id| {
                    let _ = s.complete(id, Ok(()));
                }))
            }) {
                eq_err = Some(e);
            }
        }
        EQ_BATCH as u64
    });
    if let Some(e) = eq_err {
        bail!("EQ bench failed: {e}");
    }
    if eq.sched().live() != 0 {
        bail!("EQ bench leaked {} task(s)", eq.sched().live());
    }
    for ev in evs {
        eq.event_fini(ev)?;
    }
    eq.destroy(false)?;

    // a task completed later by a transport poller (loopback, zero latency)
    let net = LoopbackNet::new(Duration::ZERO);
    let mut eq = EventQueue::with_poller(Scheduler::new(), Box::new(net.clone()));
    let cell = Rc::new(Cell::new(None));
    let mut echo_err = None;
    let echo_ns = paired(args, base, || {
        for i in 0..EQ_BATCH {
            if let Err(e) = echo(&mut eq, None, &net, i as u64, None, cell.clone()) {
                echo_err = Some(e);
            }
        }
        EQ_BATCH as u64
    });
    if let Some(e) = echo_err {
        bail!("echo bench failed: {e}");
    }
    eq.destroy(false)?;

    let fig = |name: &str, (v, b): (f64, f64), unit: &str| {
        Figure::new(name, v, unit, base_name, b, Better::Lower)
    };
    r.push(fig(
        "task create + schedule + run + complete (10k at a time)",
        per_task,
        "ns/task",
    ));
    r.push(Figure::new(
        "task create + schedule + run + complete (64 at a time)",
        per_task_small.0,
        "ns/task",
        format!("{base_name}, 64 at a time"),
        per_task_small.1,
        Better::Lower,
    ));
    r.push(fig(
        "dependency chain (each task waits on the previous)",
        chain,
        "ns/task",
    ));
    r.push(fig(
        "EQ: event launch + task + poll (64 in flight)",
        eq_round,
        "ns/event",
    ));
    r.push(fig(
        "EQ poll of an already completed event",
        poll_only,
        "ns/event",
    ));
    r.push(fig(
        "blocking call, NULL event (task + private event + wait)",
        blocking,
        "ns/call",
    ));
    r.push(fig(
        "blocking echo over loopback poller (task completed by poller)",
        echo_ns,
        "ns/call",
    ));
    r.note(format!(
        "batches of {BATCH} tasks (or {EQ_BATCH} where said) / {EQ_BATCH} events; {} run(s) of {:.2} s per figure, medians; \
         baseline = {base_name}, {BATCH} closures per batch (or {EQ_BATCH} where said), measured for {:.2} s before each run of each figure",
        args.runs(),
        args.run_time().as_secs_f64(),
        (args.run_time() / 4).as_secs_f64(),
    ));
    r.note(
        "single thread; every task body is a boxed closure capturing 8 bytes, like the baseline's",
    );
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::bench::Area;

    #[test]
    fn self_check_runs_the_dag_in_order() {
        assert_eq!(self_check().unwrap(), [0, 1, 2, 3]);
    }

    #[test]
    fn demo_runs_with_and_without_failures() {
        let err = show(&Err(TaskError::Code(-5)));
        for fail in [
            None,
            Some(DemoTask::Open),
            Some(DemoTask::FetchB),
            Some(DemoTask::Merge),
            Some(DemoTask::Retry),
        ] {
            let (dag, trace) = demo(&DemoArgs {
                fail,
                delay_ms: 0,
                net_latency_us: 10,
                json: true,
            })
            .unwrap();
            // (task, what) -> results, in order
            let steps = |task: &str, what: &str| -> Vec<Option<String>> {
                trace
                    .iter()
                    .filter(|s| s.task == task && s.what.starts_with(what))
                    .map(|s| s.result.clone())
                    .collect()
            };
            let done = |task: &str| steps(task, "done");
            let ran = |task: &str| !steps(task, "run").is_empty();
            let ok = Some("ok".to_string());
            let bad = Some(err.clone());
            // the injected error reaches `report` (which runs anyway) and its event
            let want = if fail.is_some() {
                Err(TaskError::Code(-5))
            } else {
                Ok(())
            };
            assert_eq!(dag, want, "{fail:?}");
            assert_eq!(
                steps("report", "run"),
                vec![want.err().map_or(ok.clone(), |_| bad.clone())],
                "{fail:?}"
            );
            // retry: times out once, re-runs after 1 ms, then its planned outcome
            assert_eq!(steps("retry", "run").len(), 2, "{fail:?}");
            let retry_end = if fail == Some(DemoTask::Retry) {
                &bad
            } else {
                &ok
            };
            assert_eq!(done("retry").last(), Some(retry_end), "{fail:?}");
            // the failing task, and what depends on it: failed without running
            let (a_ok, b_ok, m_ok) = match fail {
                Some(DemoTask::Open) => (false, false, false),
                Some(DemoTask::FetchB) => (true, false, false),
                Some(DemoTask::Merge) => (true, true, false),
                _ => (true, true, true),
            };
            for (task, fine) in [("fetch-a", a_ok), ("fetch-b", b_ok), ("merge", m_ok)] {
                let want = if fine { &ok } else { &bad };
                assert_eq!(done(task), vec![want.clone()], "{task} with {fail:?}");
            }
            assert_eq!(ran("fetch-a"), fail != Some(DemoTask::Open), "{fail:?}");
            assert_eq!(
                ran("merge"),
                !matches!(fail, Some(DemoTask::Open | DemoTask::FetchB)),
                "{fail:?}"
            );
        }
    }

    #[test]
    fn bench_reports_every_figure_with_its_baseline() {
        let args = BenchArgs {
            area: Area::Tse,
            json: true,
            runs: 1,
            secs: 0.005,
            quick: true,
            metrics_only: false,
            system: None,
            class: None,
            clients: 1,
        };
        let r = bench(&args, &Config::default()).unwrap();
        assert_eq!(r.figures.len(), 7);
        for f in &r.figures {
            assert!(f.value.is_finite() && f.value > 0.0, "{f:?}");
            assert!(f.baseline.is_finite() && f.baseline > 0.0, "{f:?}");
            assert!(f.ratio.is_finite(), "{f:?}");
        }
    }
}
