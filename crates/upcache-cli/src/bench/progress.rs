//! A progress bar on stderr that appears only for phases lasting over 2 s, and only on a
//! terminal, so short runs and redirected output stay clean.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

const SHOW_AFTER: Duration = Duration::from_secs(2);

pub struct Progress {
    bar: ProgressBar,
    start: Instant,
    tty: bool,
    shown: bool,
}

impl Progress {
    /// A bar of `len` units labelled `label`; shown at once if `long` (known to take over
    /// 2 s), else once 2 s have passed.
    pub fn new(label: &str, len: u64, long: bool) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
        let style = ProgressStyle::with_template("{prefix:>24} [{bar:40}] {percent:>3}% {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(label.to_owned());
        let mut p =
            Progress { bar, start: Instant::now(), tty: std::io::stderr().is_terminal(), shown: false };
        if long {
            p.show();
        }
        p
    }

    fn show(&mut self) {
        if self.tty && !self.shown {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
    }

    /// Moves the bar to `pos`, revealing it once the phase has run for 2 s.
    pub fn set(&mut self, pos: u64) {
        if !self.shown && self.start.elapsed() >= SHOW_AFTER {
            self.show();
        }
        self.bar.set_position(pos);
    }

    /// Prints a line on stderr, above the bar if it is shown.
    pub fn println(&self, line: String) {
        if self.shown {
            self.bar.println(line);
        } else {
            eprintln!("{line}");
        }
    }

    pub fn set_message(&self, msg: String) {
        self.bar.set_message(msg);
    }

    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}
