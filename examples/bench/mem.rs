//! Memory of a running process from /proc/PID/status, sampled on a thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A `/proc/PID/status` field in KiB (`VmHWM:` is the peak RSS, `VmRSS:` the current one).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// CPU time a process has run so far, all its threads, in nanoseconds: the first field of each
/// `/proc/PID/task/TID/schedstat` (the scheduler's own account, to the nanosecond, where
/// `/proc/PID/stat` counts clock ticks). `None` once the process is gone.
pub fn cpu_ns(pid: u32) -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let path = task.ok()?.path().join("schedstat");
        // A thread that ended since the listing is skipped: its time is lost, not an error.
        if let Ok(text) = std::fs::read_to_string(path) {
            total += text.split_whitespace().next()?.parse::<u64>().ok()?;
        }
    }
    Some(total)
}

/// One sample: how far the session was, the current RSS and the peak so far (bytes).
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub done: u64,
    pub rss: u64,
    pub hwm: u64,
}

pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Sample>>,
}

impl Sampler {
    /// Samples `pid` every `every`, tagging each sample with `progress`.
    pub fn start(pid: u32, progress: Arc<AtomicU64>, every: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                let done = progress.load(Ordering::Relaxed);
                if let (Some(rss), Some(hwm)) =
                    (status_kib(pid, "VmRSS:"), status_kib(pid, "VmHWM:"))
                {
                    samples.push(Sample {
                        done,
                        rss: rss * 1024,
                        hwm: hwm * 1024,
                    });
                }
                std::thread::sleep(every);
            }
            samples
        });
        Sampler { stop, thread }
    }

    pub fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}
