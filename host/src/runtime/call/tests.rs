//! The call path driven with fake calls, in-process, no plugin compiled:
//! every lane gives a call's slot back exactly once however the call ends,
//! a call its lane cannot stop keeps its slot (and counts as stuck) until
//! its work ends, a placed plugin's calls run on its own threads, and
//! admission and accounting refuse and quarantine as they say.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{Semaphore, oneshot};

use super::{Account, Admission, CallSlot, Cut, Failed, Lane, Work, WorkerShare, accounted};
use crate::contract::ProviderError;
use crate::grants::limits::Limits;
use crate::runtime::executor;
use crate::runtime::health::Health;
use crate::runtime::meter::{FaultKind, Meter};
use crate::runtime::placement::Placement;
use crate::runtime::stuck::Stuck;

const SLOTS: u32 = 2;
/// The time limit of a call that must answer: far past any delay a busy
/// machine puts before a thread starts.
const ANSWERS_WITHIN_MS: u64 = 10_000;
/// The time limit of a call that must be cut, and whose work must start
/// first: a thread of its own that started late would run nothing.
const CUT_AFTER_MS: u64 = 1_000;
/// The time limit of a call that must be cut, started or not.
const CUT_SOON_MS: u64 = 300;
/// How long a test waits for what must come: far past every limit here.
const SURELY: Duration = Duration::from_secs(30);

/// The lanes, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    OwnThread,
    PlacedOwnThread,
    Inline,
    Task,
    /// The task lane, called from one of the plugins' threads.
    TaskHere,
}

const EVERY_LANE: [Which; 5] = [
    Which::OwnThread,
    Which::PlacedOwnThread,
    Which::Inline,
    Which::Task,
    Which::TaskHere,
];

/// What the call path knows of one plugin.
struct Plugin {
    name: &'static str,
    limits: Limits,
    slots: Arc<Semaphore>,
    health: Arc<Health>,
    stuck: Arc<Stuck>,
    placement: Placement,
    /// One worker of the test's runtime at a time.
    workers: Arc<WorkerShare>,
}

impl Plugin {
    /// A plugin whose calls have `timeout_ms` each, and whose calls are
    /// placed on as many file threads as it has slots.
    fn new(name: &'static str, timeout_ms: u64) -> Self {
        Self::placed_on(name, timeout_ms, SLOTS as usize)
    }

    fn placed_on(name: &'static str, timeout_ms: u64, file_threads: usize) -> Self {
        let limits = Limits {
            timeout_ms,
            concurrent_calls: SLOTS,
            ..Limits::default()
        };
        Self {
            name,
            limits,
            slots: Arc::new(Semaphore::new(SLOTS as usize)),
            health: Arc::default(),
            stuck: Stuck::new(name.into(), Gauge::default()),
            placement: Placement::new(name, file_threads).unwrap(),
            workers: Arc::new(WorkerShare::new(1)),
        }
    }

    fn admission(&self) -> Admission<'_> {
        Admission {
            plugin: self.name,
            limits: &self.limits,
            slots: &self.slots,
            health: &self.health,
            stuck: &self.stuck,
        }
    }

    fn lane(&self, which: Which) -> Lane<'_> {
        match which {
            Which::OwnThread => Lane::OwnThread(None),
            Which::PlacedOwnThread => Lane::OwnThread(Some(&self.placement)),
            Which::Inline => Lane::Inline(&self.placement),
            Which::Task | Which::TaskHere => Lane::Task(&self.workers),
        }
    }

    async fn slot(&self) -> CallSlot {
        let (slot, ()) = self.admission().wait(|| async { Ok(()) }).await.unwrap();
        slot
    }

    /// Runs `make`'s work in lane `which`, admitted as a call is.
    async fn run<R, W, F>(&self, which: Which, make: W) -> Result<R, Cut>
    where
        W: FnOnce() -> F + Send + 'static,
        F: Future<Output = R> + Send + 'static,
        R: Send + 'static,
    {
        let slot = self.slot().await;
        let limit = self.limits.timeout();
        let work = Work {
            operation: "read",
            deadline: Instant::now() + limit,
            limit,
            stuck: &self.stuck,
            make,
        };
        let _here = (which == Which::TaskHere).then(executor::as_plugin_thread);
        self.lane(which).run(slot, work).await
    }

    /// Waits until every slot is given back, then checks that none was
    /// given back twice.
    async fn every_slot_back(&self, which: Which) {
        let all = tokio::time::timeout(SURELY, self.slots.acquire_many(SLOTS))
            .await
            .unwrap_or_else(|_| panic!("{which:?}: a slot was never given back"))
            .unwrap();
        drop(all);
        assert_eq!(
            self.slots.available_permits(),
            SLOTS as usize,
            "{which:?}: a slot was given back twice"
        );
    }

    /// Waits until no call is stuck.
    async fn none_stuck(&self) {
        let waited = Instant::now();
        while self.stuck.now() > 0 {
            assert!(waited.elapsed() < SURELY, "a stuck call never ended");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn every_lane_hands_back_its_works_outcome_as_it_is_and_its_slot_once() {
    let plugin = Plugin::new("answers", ANSWERS_WITHIN_MS);
    runtime().block_on(async {
        for which in EVERY_LANE {
            let answer = plugin.run(which, || async { Ok::<u32, &str>(7) }).await;
            assert!(matches!(answer, Ok(Ok(7))), "{which:?}: {answer:?}");
            plugin.every_slot_back(which).await;
            let trapped = plugin
                .run(which, || async { Err::<u32, _>("trapped") })
                .await;
            assert!(
                matches!(trapped, Ok(Err("trapped"))),
                "{which:?}: {trapped:?}"
            );
            plugin.every_slot_back(which).await;
        }
    });
}

#[test]
fn every_lane_ends_a_call_at_its_time_limit_and_gives_its_slot_back() {
    let plugin = Plugin::new("waits", CUT_SOON_MS);
    runtime().block_on(async {
        for which in EVERY_LANE {
            let (ended, dropped) = oneshot::channel::<()>();
            let started = Instant::now();
            let cut = plugin
                .run(which, move || async move {
                    let _ended = ended;
                    std::future::pending::<()>().await
                })
                .await;
            assert!(matches!(cut, Err(Cut::TimedOut)), "{which:?}: {cut:?}");
            assert!(
                started.elapsed() >= plugin.limits.timeout(),
                "{which:?}: cut before its time limit"
            );
            // The work ends: stopped, or (inline) left to linger a few
            // time limits at most.
            let _ = tokio::time::timeout(SURELY, dropped).await.unwrap();
            plugin.every_slot_back(which).await;
        }
    });
}

/// Starts a call of work that never ends in lane `which`, and gives up on
/// it once its work runs.
async fn give_up_on_a_running_call(plugin: &Plugin, which: Which) {
    let (running, began) = oneshot::channel();
    let call = plugin.run(which, move || async move {
        let _ = running.send(());
        std::future::pending::<()>().await
    });
    tokio::select! {
        ended = call => panic!("{which:?}: a call that never ends ended: {ended:?}"),
        _ = began => {}
    }
}

#[test]
fn every_lane_gives_a_slot_back_when_the_caller_gives_up_on_its_call() {
    let plugin = Plugin::new("cancelled", CUT_AFTER_MS);
    runtime().block_on(async {
        for which in EVERY_LANE {
            give_up_on_a_running_call(&plugin, which).await;
            // The caller is gone; the lane ends the work within its limits.
            plugin.every_slot_back(which).await;
        }
    });
}

#[test]
fn a_task_is_stopped_as_soon_as_its_caller_gives_up_on_it() {
    // Its time limit is far off: only the caller giving up can end it.
    let plugin = Plugin::new("stopped", ANSWERS_WITHIN_MS);
    runtime().block_on(async {
        for which in [Which::Task, Which::TaskHere] {
            give_up_on_a_running_call(&plugin, which).await;
            let back = Duration::from_millis(ANSWERS_WITHIN_MS / 2);
            let all = tokio::time::timeout(back, plugin.slots.acquire_many(SLOTS)).await;
            assert!(
                all.is_ok(),
                "{which:?}: the task kept its slot after its caller left"
            );
            drop(all);
        }
    });
}

#[test]
fn the_task_lane_runs_a_call_from_a_plugin_thread_on_that_thread_and_any_other_elsewhere() {
    let plugin = Plugin::new("here", ANSWERS_WITHIN_MS);
    runtime().block_on(async {
        let caller = std::thread::current().id();
        let on = |which| plugin.run(which, || async { std::thread::current().id() });
        assert_eq!(on(Which::TaskHere).await.unwrap(), caller);
        assert_ne!(on(Which::Task).await.unwrap(), caller);
    });
}

#[test]
fn a_plugins_calls_hold_no_more_workers_than_its_share_and_leave_the_rest_to_others() {
    let filler = Plugin::new("filler", ANSWERS_WITHIN_MS);
    let other = Plugin::new("other", ANSWERS_WITHIN_MS);
    runtime().block_on(async {
        // Work no tick interrupts: it holds its worker until released.
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (holding, began) = oneshot::channel();
        let first = filler.run(Which::Task, move || async move {
            let _ = holding.send(());
            held.recv().unwrap();
            "first"
        });
        let second_ran = Arc::new(AtomicBool::new(false));
        let second = async {
            began.await.unwrap();
            let ran = second_ran.clone();
            filler
                .run(Which::Task, move || async move {
                    ran.store(true, Ordering::SeqCst);
                    "second"
                })
                .await
        };
        let meanwhile = async {
            let waited = Instant::now();
            while filler.workers.waiting() == 0 {
                assert!(waited.elapsed() < SURELY, "the second call never waited");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(!second_ran.load(Ordering::SeqCst), "it ran past the share");
            assert_eq!(filler.workers.running(), 1);
            let answer = other.run(Which::Task, || async { "other" }).await;
            assert_eq!(answer.unwrap(), "other", "another plugin's call waited");
            release.send(()).unwrap();
        };
        let (first, second, ()) = tokio::join!(first, second, meanwhile);
        assert_eq!((first.unwrap(), second.unwrap()), ("first", "second"));
        assert_eq!(filler.workers.running(), 0);
        filler.every_slot_back(Which::Task).await;
    });
}

#[test]
fn every_lane_gives_a_slot_back_when_the_work_panics() {
    let plugin = Plugin::new("panics", ANSWERS_WITHIN_MS);
    runtime().block_on(async {
        for which in EVERY_LANE {
            let ended = plugin
                .run(which, || async { panic!("the host's own bug") })
                .await;
            match ended {
                Err(Cut::Ended(failure)) => assert!(
                    failure.contains("panicked with message \"the host's own bug\""),
                    "{which:?}: {failure}"
                ),
                other => panic!("{which:?}: {other:?}"),
            }
            plugin.every_slot_back(which).await;
        }
    });
}

#[test]
fn a_call_stuck_in_a_file_operation_keeps_its_slot_until_the_operation_returns() {
    let plugin = Plugin::new("stuck", CUT_AFTER_MS);
    runtime().block_on(async {
        for which in [Which::OwnThread, Which::PlacedOwnThread, Which::Inline] {
            let (release, operation) = std::sync::mpsc::channel::<()>();
            let blocking = which != Which::Inline;
            let cut = plugin
                .run(which, move || async move {
                    // A FIFO nobody writes: nothing can stop it.
                    if blocking {
                        operation.recv().ok()
                    } else {
                        tokio::task::spawn_blocking(move || operation.recv().ok())
                            .await
                            .unwrap()
                    }
                })
                .await;
            assert!(matches!(cut, Err(Cut::TimedOut)), "{which:?}: {cut:?}");
            assert_eq!(plugin.stuck.now(), 1, "{which:?}");
            assert_eq!(
                plugin.slots.available_permits(),
                SLOTS as usize - 1,
                "{which:?}: a stuck call gave its slot back"
            );
            release.send(()).unwrap();
            plugin.every_slot_back(which).await;
            plugin.none_stuck().await;
        }
    });
}

#[test]
fn a_call_whose_thread_never_starts_is_given_its_slot_back_by_its_caller() {
    // One file thread, held by a call stuck in a file operation.
    let plugin = Plugin::placed_on("queued", CUT_AFTER_MS, 1);
    runtime().block_on(async {
        let (release, operation) = std::sync::mpsc::channel::<()>();
        let cut = plugin
            .run(Which::PlacedOwnThread, move || async move {
                operation.recv().ok()
            })
            .await;
        assert!(matches!(cut, Err(Cut::TimedOut)), "{cut:?}");
        let (ran, never) = oneshot::channel::<()>();
        let queued = plugin
            .run(Which::PlacedOwnThread, move || async move {
                let _ = ran.send(());
            })
            .await;
        assert!(matches!(queued, Err(Cut::TimedOut)), "{queued:?}");
        // Its caller took its slot back; it is not stuck, the first call is.
        assert_eq!(plugin.slots.available_permits(), SLOTS as usize - 1);
        assert_eq!(plugin.stuck.now(), 1);
        release.send(()).unwrap();
        plugin.every_slot_back(Which::PlacedOwnThread).await;
        plugin.none_stuck().await;
        // Its thread, started at last, ran nothing.
        assert!(tokio::time::timeout(SURELY, never).await.unwrap().is_err());
    });
}

#[test]
fn calls_stuck_in_every_slot_wedge_the_plugin_until_one_ends() {
    let plugin = Plugin::new("wedged", CUT_AFTER_MS);
    runtime().block_on(async {
        let mut releases = Vec::new();
        for _ in 0..SLOTS {
            let (release, operation) = std::sync::mpsc::channel::<()>();
            releases.push(release);
            let cut = plugin
                .run(Which::OwnThread, move || async move { operation.recv().ok() })
                .await;
            assert!(matches!(cut, Err(Cut::TimedOut)), "{cut:?}");
        }
        match plugin.admission().check(None) {
            Err(Failed::Busy(ProviderError::Unavailable(message))) => assert_eq!(
                message,
                "plugin wedged is wedged: 2 of its 2 call slots are held by calls stuck past their time limit of 1000 ms, each waiting on an operation that has not returned; refused at once until one ends"
            ),
            other => panic!("{other:?}"),
        }
        // Once one ends, its slot is free, and calls are admitted again.
        releases.pop().unwrap().send(()).unwrap();
        drop(plugin.slot().await);
        assert!(plugin.admission().check(None).is_ok());
        releases.pop().unwrap().send(()).unwrap();
        plugin.every_slot_back(Which::OwnThread).await;
        plugin.none_stuck().await;
    });
}

#[test]
fn a_placed_plugins_calls_run_on_its_own_threads() {
    let plugin = Plugin::new("placed", ANSWERS_WITHIN_MS);
    let thread = || std::thread::current().name().map(str::to_owned);
    runtime().block_on(async {
        let apart = plugin
            .run(Which::PlacedOwnThread, move || async move { thread() })
            .await
            .unwrap();
        assert_eq!(apart.as_deref(), Some("files:placed"));
        let inline = plugin
            .run(Which::Inline, move || async move {
                let operation = tokio::task::spawn_blocking(thread).await.unwrap();
                (thread(), operation)
            })
            .await
            .unwrap();
        assert_eq!(
            (inline.0.as_deref(), inline.1.as_deref()),
            (Some("files:placed"), Some("files:placed"))
        );
        for which in [Which::OwnThread, Which::Task] {
            let elsewhere = plugin
                .run(which, move || async move { thread() })
                .await
                .unwrap();
            assert_ne!(elsewhere.as_deref(), Some("files:placed"), "{which:?}");
        }
    });
}

#[test]
fn admission_refuses_a_quarantined_path_at_once_and_no_other() {
    let plugin = Plugin::new("paths", ANSWERS_WITHIN_MS);
    for _ in 0..3 {
        plugin.health.record_fault(Some("bad"));
    }
    match plugin.admission().check(Some("bad")) {
        Err(Failed::Quarantined(message)) => {
            assert!(
                message.starts_with("path \"bad\" of plugin paths is quarantined for another "),
                "{message}"
            );
            assert!(
                message.ends_with(" ms after 3 faults in a row"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(plugin.admission().check(Some("good")).is_ok());
    assert!(plugin.admission().check(None).is_ok());
    assert_eq!(plugin.slots.available_permits(), SLOTS as usize);
}

#[test]
fn admission_refuses_as_busy_a_call_whose_slot_never_comes() {
    let plugin = Plugin::new("busy", CUT_SOON_MS);
    runtime().block_on(async {
        let taken = plugin.slots.clone().acquire_many_owned(SLOTS).await.unwrap();
        let refused = plugin.admission().wait(|| async { Ok(()) }).await;
        match refused {
            Err(ProviderError::Unavailable(message)) => assert_eq!(
                message,
                "plugin busy is busy: its 2 call slots (or the host's descriptor budget) stayed taken for 300 ms"
            ),
            other => panic!("{other:?}"),
        }
        drop(taken);
        let more = plugin
            .admission()
            .wait(|| async { Err::<(), _>(ProviderError::Unavailable("no descriptors".into())) })
            .await;
        assert!(
            matches!(&more, Err(ProviderError::Unavailable(message)) if message == "no descriptors"),
            "{more:?}"
        );
        assert_eq!(plugin.slots.available_permits(), SLOTS as usize);
    });
}

#[test]
fn accounting_quarantines_after_faults_in_a_row_which_only_a_counted_answer_clears() {
    let plugin = Plugin::new("accounted", ANSWERS_WITHIN_MS);
    let meter = Meter::new(plugin.name, &plugin.health);
    let account = Account {
        plugin: plugin.name,
        id: 0,
        health: &plugin.health,
        meter: &meter,
    };
    let fault = || async { Err::<(), _>(Failed::Faulted(FaultKind::Trap, "it trapped".into())) };
    runtime().block_on(async {
        let path = Some("p");
        for _ in 0..2 {
            let faulted = accounted(&account, "read", path, true, fault()).await;
            assert!(matches!(&faulted, Err(ProviderError::Fault(message)) if message == "it trapped"));
        }
        // `locate` alone answering proves nothing of the path's `read`.
        accounted(&account, "locate", path, false, async { Ok(()) })
            .await
            .unwrap();
        let _ = accounted(&account, "read", path, true, fault()).await;
        assert!(plugin.health.quarantine_left(path).is_some());
        let refused = accounted(&account, "read", path, true, async {
            plugin.admission().check(path)
        })
        .await;
        assert!(
            matches!(&refused, Err(ProviderError::Unavailable(message)) if message.contains("is quarantined")),
            "{refused:?}"
        );

        let other = Some("q");
        for _ in 0..2 {
            let _ = accounted(&account, "read", other, true, fault()).await;
        }
        accounted(&account, "read", other, true, async { Ok(()) })
            .await
            .unwrap();
        let _ = accounted(&account, "read", other, true, fault()).await;
        assert!(plugin.health.quarantine_left(other).is_none());
    });
}
