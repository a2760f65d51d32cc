//! The clock that drives an engine's time limits: a thread that advances
//! the engine's epoch every [`EPOCH_TICK`] while some call may run plugin
//! code on the engine, and sleeps (parked, waking nobody) once none has for
//! [`LINGER_TICKS`] ticks, so that an idle server costs no wakeups. A call
//! counts itself in with [`EpochClock::running`] for as long as it may run
//! plugin code. A clock woken by a call ticks a whole [`EPOCH_TICK`] later,
//! so that call's first tick is charged no earlier than it would be on a
//! clock that never slept.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::Thread;

use anyhow::{Context, Result};
use wasmtime::{Engine, EngineWeak};

use crate::grants::limits::EPOCH_TICK;

/// Ticks the clock goes on for after the last it saw a call, before it
/// parks. Calls of a few microseconds, coming in bursts, then find it
/// awake, and waking it costs them nothing; parked as soon as no call ran,
/// it was woken by the first call of each burst (thousands of futex calls
/// and thread switches a second under load, by `perf stat`).
const LINGER_TICKS: u32 = 10;

/// The epoch clock of one engine; clones share it.
#[derive(Clone)]
pub struct EpochClock(Arc<Clock>);

struct Clock {
    /// Calls that may run plugin code on the engine now.
    running: AtomicUsize,
    /// Whether a call started running, none running before it, since the
    /// clock last looked.
    started: AtomicBool,
    /// The thread that advances the epoch.
    ticker: OnceLock<Thread>,
}

/// One call counted as running until it is dropped.
pub struct Running<'a>(&'a Clock);

impl EpochClock {
    /// Starts the clock of `engine`. Its thread ends once the engine or
    /// the clock is gone.
    pub fn start(engine: &Engine) -> Result<Self> {
        let clock = Arc::new(Clock {
            running: AtomicUsize::new(0),
            started: AtomicBool::new(false),
            ticker: OnceLock::new(),
        });
        let ticking = Arc::downgrade(&clock);
        let engine = engine.weak();
        let ticker = std::thread::Builder::new()
            .name("resmux-epoch".into())
            .spawn(move || tick(&ticking, &engine))
            .context("cannot start the epoch clock")?;
        // Set before any call can count itself in: `start` has not returned.
        let _ = clock.ticker.set(ticker.thread().clone());
        Ok(Self(clock))
    }

    /// Counts a call as running plugin code until the guard it returns is
    /// dropped, waking the clock if it sleeps.
    pub fn running(&self) -> Running<'_> {
        if self.0.running.fetch_add(1, Ordering::SeqCst) == 0 {
            self.0.started.store(true, Ordering::SeqCst);
            self.0.wake();
        }
        Running(&self.0)
    }
}

impl Clock {
    /// Whether a call ran since the clock last asked.
    fn ran_since(&self) -> bool {
        self.started.swap(false, Ordering::SeqCst) || self.running.load(Ordering::SeqCst) > 0
    }

    fn wake(&self) {
        if let Some(ticker) = self.ticker.get() {
            ticker.unpark();
        }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The clock is gone: its thread wakes, to end.
impl Drop for Clock {
    fn drop(&mut self) {
        self.wake();
    }
}

/// Advances `engine`'s epoch every [`EPOCH_TICK`] while calls run, and
/// parks once none has for [`LINGER_TICKS`], until the clock or the engine
/// is gone.
fn tick(clock: &Weak<Clock>, engine: &EngineWeak) {
    loop {
        loop {
            let Some(alive) = clock.upgrade() else {
                return;
            };
            if alive.running.load(Ordering::SeqCst) > 0 {
                break;
            }
            drop(alive);
            // An unpark since the count was read makes this return at once.
            std::thread::park();
        }
        let mut quiet_ticks = 0;
        while quiet_ticks < LINGER_TICKS {
            std::thread::sleep(EPOCH_TICK);
            let Some(engine) = engine.upgrade() else {
                return;
            };
            engine.increment_epoch();
            let Some(alive) = clock.upgrade() else {
                return;
            };
            quiet_ticks = match alive.ran_since() {
                true => 0,
                false => quiet_ticks + 1,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use wasmtime::{Config, Instance, Module, Store, Trap};

    use super::*;

    /// A core module whose `spin` loops for ever:
    /// `(module (func (export "spin") (loop br 0)))`.
    #[rustfmt::skip]
    const SPIN: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
        0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // types: () -> ()
        0x03, 0x02, 0x01, 0x00, // functions: one, of type 0
        0x07, 0x08, 0x01, 0x04, b's', b'p', b'i', b'n', 0x00, 0x00, // export "spin"
        0x0a, 0x09, 0x01, 0x07, 0x00, // code: one body of 7 bytes, no locals
        0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b, // loop, br 0, end, end
    ];

    #[test]
    fn a_call_that_starts_while_the_clock_sleeps_is_interrupted() {
        let mut config = Config::new();
        config.epoch_interruption(true);
        let engine = Engine::new(&config).unwrap();
        let clock = EpochClock::start(&engine).unwrap();
        let module = Module::new(&engine, SPIN).unwrap();
        let (ended, end) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Each call finds the clock asleep, or about to sleep: no call
            // ran for a few ticks before it.
            for _ in 0..3 {
                std::thread::sleep(EPOCH_TICK * 5);
                let mut store = Store::new(&engine, ());
                store.set_epoch_deadline(1);
                let instance = Instance::new(&mut store, &module, &[]).unwrap();
                let spin = instance
                    .get_typed_func::<(), ()>(&mut store, "spin")
                    .unwrap();
                let _running = clock.running();
                let error = spin.call(&mut store, ()).unwrap_err();
                ended.send(error.downcast_ref::<Trap>().copied()).unwrap();
            }
        });
        for _ in 0..3 {
            let trap = end
                .recv_timeout(Duration::from_secs(10))
                .expect("a spinning call was not interrupted within 10 s");
            assert_eq!(trap, Some(Trap::Interrupt));
        }
    }
}
