//! The output and plot flags every reporting subcommand shares, so that `bench`, `replay`,
//! `index-bench`, `alloc-bench`, `hit-ratio` and `plot` take the same `--json`,
//! `--output-format`, `--output` and `--plot` and mean the same by them.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};

/// The report's format and destination, and an optional chart.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OutputArgs {
    /// Print JSON instead of the table (the same as --output-format=json)
    #[arg(long)]
    pub json: bool,
    /// fio's name for the report's format: normal (the table) or json
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = OutputFormat::Normal)]
    pub output_format: OutputFormat,
    /// Write the report to FILE instead of stdout (fio's --output); progress and warnings stay
    /// on stderr
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Draw the command's chart to FILE (.png or .svg): bench and replay the latency CDF of
    /// each engine's first run, hit-ratio the hit ratio against cache size, index-bench and
    /// alloc-bench operations per second against threads, plot what --kind asks for
    #[arg(long, value_name = "FILE", visible_alias = "plot-cdf")]
    pub plot: Option<PathBuf>,
}

/// `--output-format`, fio's name for what `--json` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    /// The table.
    #[default]
    Normal,
    /// JSON.
    Json,
}

impl OutputArgs {
    /// Whether the report is JSON.
    pub fn json(&self) -> bool {
        self.json || self.output_format == OutputFormat::Json
    }

    /// Checks the flags and sends stdout to `--output` if given. Call before any output, so
    /// a bad flag fails before minutes of measuring.
    pub fn start(&self) -> Result<()> {
        if let Some(p) = &self.plot {
            check_chart_path(p)?;
        }
        if let Some(path) = &self.output {
            let f = std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
            // SAFETY: both descriptors are open (ours and the process's stdout); dup2 only
            // makes 1 another name for `f`'s file, which outlives the call (1 keeps it open).
            if unsafe { libc::dup2(f.as_raw_fd(), libc::STDOUT_FILENO) } < 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("send stdout to {}", path.display()));
            }
        }
        Ok(())
    }
}

/// Fails unless `p` names a chart format the plotter writes.
pub fn check_chart_path(p: &Path) -> Result<()> {
    ensure!(
        matches!(p.extension().and_then(|e| e.to_str()), Some("png" | "svg")),
        "--plot {} must end in .png or .svg",
        p.display()
    );
    Ok(())
}
