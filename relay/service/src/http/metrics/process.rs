//! The standard `process_*` families (Prometheus' client libraries all export them), read from
//! `/proc/self` at each scrape: CPU time, memory, open files and their limit, start time. On a
//! system without `/proc` the families are left out.

use std::fmt::Write as _;

/// The `process_*` families, or nothing where `/proc/self` cannot be read.
pub fn render(text: &mut String) {
    let Some(process) = Process::read() else {
        return;
    };
    let mut sample = |name: &str, kind: &str, help: &str, value: f64| {
        super::family(text, name, kind, help);
        let _ = writeln!(text, "{name} {value}");
    };
    sample(
        "process_cpu_seconds_total",
        "counter",
        "User and system CPU time the process has used, in seconds.",
        process.cpu_seconds,
    );
    sample(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        process.resident_bytes,
    );
    sample(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        process.virtual_bytes,
    );
    sample(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since the Unix epoch, in seconds.",
        process.start_time_seconds,
    );
    if let Some(open) = process.open_fds {
        sample(
            "process_open_fds",
            "gauge",
            "Open file descriptors (connections included).",
            open,
        );
    }
    if let Some(max) = process.max_fds {
        sample(
            "process_max_fds",
            "gauge",
            "The most file descriptors the process may open (its soft limit).",
            max,
        );
    }
}

/// What `/proc/self` says about the process.
struct Process {
    cpu_seconds: f64,
    resident_bytes: f64,
    virtual_bytes: f64,
    start_time_seconds: f64,
    open_fds: Option<f64>,
    max_fds: Option<f64>,
}

impl Process {
    fn read() -> Option<Process> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        let limits = std::fs::read_to_string("/proc/self/limits").ok();
        // SAFETY: sysconf only reads a configuration value.
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let fields = StatFields::parse(&stat)?;
        let ticks = positive(ticks)?;
        let boot_time: f64 = boot
            .lines()
            .find_map(|line| line.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|entries| entries.count() as f64);
        Some(Process {
            cpu_seconds: (fields.utime + fields.stime) / ticks,
            resident_bytes: fields.rss_pages * positive(page)?,
            virtual_bytes: fields.vsize,
            start_time_seconds: boot_time + fields.starttime / ticks,
            open_fds,
            max_fds: limits.as_deref().and_then(max_open_files),
        })
    }
}

fn positive(value: libc::c_long) -> Option<f64> {
    (value > 0).then_some(value as f64)
}

/// The fields of `/proc/self/stat` used here (proc(5) numbers them from 1).
struct StatFields {
    utime: f64,
    stime: f64,
    starttime: f64,
    vsize: f64,
    rss_pages: f64,
}

impl StatFields {
    fn parse(stat: &str) -> Option<StatFields> {
        // The command name (field 2) is in parentheses and may hold spaces: count after it.
        let after_name = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        // `fields[0]` is field 3 (state).
        let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
        Some(StatFields {
            utime: field(14)?,
            stime: field(15)?,
            starttime: field(22)?,
            vsize: field(23)?,
            rss_pages: field(24)?,
        })
    }
}

/// The soft limit on open files from `/proc/self/limits`.
fn max_open_files(limits: &str) -> Option<f64> {
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_a_name_with_spaces() {
        let stat = "4242 (relay serve) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 9 0 \
                    12345 104857600 2560 18446744073709551615";
        let fields = StatFields::parse(stat).expect("parsed");
        assert_eq!(fields.utime, 250.0);
        assert_eq!(fields.stime, 50.0);
        assert_eq!(fields.starttime, 12345.0);
        assert_eq!(fields.vsize, 104_857_600.0);
        assert_eq!(fields.rss_pages, 2560.0);
    }

    #[test]
    fn the_soft_open_files_limit_is_read() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024.0));
    }

    #[test]
    fn this_process_is_described() {
        let mut text = String::new();
        render(&mut text);
        for family in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
        ] {
            assert!(text.contains(&format!("\n{family} ")), "{family}: {text}");
        }
    }
}
