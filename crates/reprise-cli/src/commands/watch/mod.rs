//! `reprise watch [RUN]`: every live run of the state directory in one
//! terminal screen, the tasks that wait on someone first. The board (what
//! is shown, in what order, what wakes each entry) is the core's
//! `attention` module; `source` reads the state directory into it; `app`
//! is what each key does; `view` draws. Every action goes through the
//! function behind its command (`approve`, `task resume`, `task pause`,
//! `task suspend`, `logs -f`, `diff`, `task show`).

mod app;
mod source;
mod view;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyEventKind};
use reprise_core::attention::{Board, RowKey};
use serde_json::{Value, json};

use crate::commands::logs::LiveOutput;
use crate::error::CliError;
use crate::output::Outcome;
use crate::settings::Settings;

use app::{App, Effect, Mode, Pane, PaneKind};
use source::Source;

/// How often the state directory is looked at for changes.
const POLL_EVERY: Duration = Duration::from_millis(250);
/// How often the fleet's database is asked for its tasks' hosts.
const FLEET_EVERY: Duration = Duration::from_secs(2);

#[derive(Debug, clap::Args)]
pub(crate) struct WatchArgs {
    /// Only this run (`R-...`), finished or not (default: every unfinished
    /// run).
    run: Option<String>,
    /// Also show the hosts of a fleet's tasks, from its PostgreSQL database
    /// (a postgres:// URL).
    #[arg(long, value_name = "URL")]
    fleet: Option<String>,
    /// Print one frame as plain text (with --json, the board) and exit.
    #[arg(long)]
    once: bool,
}

impl WatchArgs {
    pub(crate) fn run(self, settings: &Settings) -> Result<Outcome, CliError> {
        let state = settings.state()?;
        let mut source = Source::new(state, self.run)?;
        let fleet = self
            .fleet
            .as_deref()
            .map(crate::commands::fleet::status_client)
            .transpose()?;
        let mut board = Board::new();
        source.poll(&mut board)?;
        if let Some(client) = &fleet {
            let status = client
                .status()
                .map_err(crate::commands::fleet::fleet_error)?;
            source::apply_fleet(&mut board, &status, source.named());
        }
        board.select_first();
        let mut app = App::new(board);
        if self.once {
            return Ok(once(&app));
        }
        if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            return Err(CliError::usage(
                "reprise watch draws on a terminal and stdout is not one; `reprise watch --once` prints one frame as text",
            ));
        }
        let stop = stop_flag()?;
        let mut terminal = ratatui::init();
        let looped = Watch {
            settings,
            source: &mut source,
            fleet: fleet.map(fleet_reports),
            follow: None,
        }
        .run(&mut terminal, &mut app, &stop);
        ratatui::restore();
        looped?;
        if let Some(signal) = signal_seen(&stop) {
            crate::commands::run::note_stop_signal(signal);
        }
        Ok(Outcome {
            json: json!({"quit": true}),
            text: String::new(),
            ok: true,
            exit: None,
        })
    }
}

/// `--once`: the frame as text, and the board as JSON.
fn once(app: &App) -> Outcome {
    let now = source::now_ms();
    // As wide as the terminal it is printed on, else wide enough for a
    // run id and a task name side by side.
    let width = if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        ratatui::crossterm::terminal::size()
            .ok()
            .map_or(160, |(width, _)| width.max(100))
    } else {
        160
    };
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(
        width,
        view::full_height(app),
    ))
    .expect("a test backend draws");
    terminal
        .draw(|frame| view::draw(frame, app, now))
        .expect("a test backend draws");
    let text = view::buffer_text(terminal.backend().buffer());
    Outcome {
        json: board_json(&app.board, now),
        text,
        ok: true,
        exit: None,
    }
}

/// The board as `--once --json` prints it.
fn board_json(board: &Board, now_ms: i64) -> Value {
    let row = |task: &reprise_core::attention::TaskView| {
        let mut value = serde_json::to_value(task).expect("a task view serialises");
        value["spent_micro_usd"] = json!(task.spend().total_micro_usd());
        value["elapsed_ms"] = json!(task.elapsed_ms(now_ms));
        value["wakes"] = json!(task.flag.as_ref().map(|flag| flag.wakes(&task.run_id)));
        value
    };
    json!({
        "attention": board.attention().map(row).collect::<Vec<_>>(),
        "tasks": board.tasks().map(row).collect::<Vec<_>>(),
        "selected": board.selected_key(),
    })
}

/// SIGTERM, SIGHUP and SIGINT end the watch the way `q` does, the terminal
/// restored; the flag holds the signal's number.
fn stop_flag() -> Result<Arc<std::sync::atomic::AtomicI32>, CliError> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let seen = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|err| CliError::usage(format!("cannot watch for stop signals: {err}")))?;
    let flag = Arc::clone(&seen);
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            flag.store(signal, Ordering::SeqCst);
        }
    });
    Ok(seen)
}

fn signal_seen(stop: &std::sync::atomic::AtomicI32) -> Option<i32> {
    match stop.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Reads the fleet's status every [`FLEET_EVERY`] on a thread of its own,
/// until the watch stops listening.
fn fleet_reports(
    client: reprise_fleet::FleetClient,
) -> std::sync::mpsc::Receiver<reprise_fleet::FleetStatus> {
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(FLEET_EVERY);
            // An unanswered ask is asked again next time.
            if let Ok(status) = client.status()
                && send.send(status).is_err()
            {
                break;
            }
        }
    });
    receive
}

/// The running watch: the board kept up to date, keys read, effects done.
struct Watch<'a> {
    settings: &'a Settings,
    source: &'a mut Source,
    /// The fleet's status as a thread of its own reads it: a slow or
    /// unreachable database never holds up the screen.
    fleet: Option<std::sync::mpsc::Receiver<reprise_fleet::FleetStatus>>,
    /// The live output being followed, for the output pane.
    follow: Option<(RowKey, LiveOutput)>,
}

impl Watch<'_> {
    fn run(
        &mut self,
        terminal: &mut ratatui::DefaultTerminal,
        app: &mut App,
        stop: &std::sync::atomic::AtomicI32,
    ) -> Result<(), CliError> {
        let mut polled = Instant::now();
        let mut redraw = true;
        while !app.quit && signal_seen(stop).is_none() {
            if redraw {
                terminal
                    .draw(|frame| view::draw(frame, app, source::now_ms()))
                    .map_err(|err| {
                        CliError::failed(format!("cannot draw on the terminal: {err}"))
                    })?;
                redraw = false;
            }
            let timeout = POLL_EVERY.saturating_sub(polled.elapsed());
            if event::poll(timeout)
                .map_err(|err| CliError::failed(format!("cannot read the terminal: {err}")))?
            {
                match event::read()
                    .map_err(|err| CliError::failed(format!("cannot read the terminal: {err}")))?
                {
                    Event::Key(key) if key.kind == KeyEventKind::Press => {
                        if let Some(effect) = app.on_key(key) {
                            self.perform(app, effect);
                        }
                        redraw = true;
                    }
                    Event::Resize(..) => redraw = true,
                    _ => {}
                }
            }
            if polled.elapsed() >= POLL_EVERY {
                polled = Instant::now();
                // A clock on screen (elapsed times) moves every poll.
                redraw = true;
                self.source.poll(&mut app.board)?;
                if let Some(status) = self
                    .fleet
                    .as_ref()
                    .and_then(|fleet| fleet.try_iter().last())
                {
                    source::apply_fleet(&mut app.board, &status, self.source.named());
                }
                self.follow_output(app);
            }
        }
        Ok(())
    }

    /// Appends what the followed task wrote to its open pane.
    fn follow_output(&mut self, app: &mut App) {
        let Some((task, output)) = &mut self.follow else {
            return;
        };
        let open = matches!(&app.mode, Mode::Pane(pane) if pane.kind == PaneKind::Output && pane.task == *task);
        if !open {
            self.follow = None;
            return;
        }
        let fresh = output.read_new();
        if !fresh.is_empty() {
            app.append_output(task, &String::from_utf8_lossy(&fresh));
        }
    }

    /// Does what a key asked, through the command that does it; its result
    /// (or its refusal) becomes the message line.
    fn perform(&mut self, app: &mut App, effect: Effect) {
        let result = match effect {
            Effect::Approve { task, note } => {
                crate::commands::approve::approve(self.settings, &name(&task), note)
            }
            Effect::Resume { task } => {
                crate::commands::task::resume_live(self.settings, &name(&task))
            }
            Effect::PauseOrUnpause { task, paused: true } => {
                crate::commands::task::unpause(self.settings, &name(&task))
            }
            Effect::PauseOrUnpause {
                task,
                paused: false,
            } => crate::commands::task::pause(self.settings, &name(&task), None),
            Effect::Suspend { task, reason } => {
                crate::commands::task::suspend(self.settings, &name(&task), None, reason)
            }
            Effect::Open { task, kind } => {
                self.open(app, task, kind);
                return;
            }
        };
        app.message = Some(match result {
            Ok(outcome) => outcome.text.lines().next().unwrap_or("done").to_owned(),
            Err(err) => format!("refused: {err}"),
        });
        // What the action wrote shows at the next poll; poll now.
        let _ = self.source.poll(&mut app.board);
    }

    /// Opens a pane: the task's details, its diff, or its live output.
    fn open(&mut self, app: &mut App, task: RowKey, kind: PaneKind) {
        let text = match kind {
            PaneKind::Details => crate::commands::status::show(self.settings, &name(&task))
                .map(|outcome| outcome.text),
            PaneKind::Diff => crate::commands::deliver::diff(
                self.settings,
                Some(&task.run_id),
                Some(&task.task_id),
            )
            .map(|outcome| outcome.text),
            PaneKind::Output => self.start_following(&task).map(|fresh| {
                if fresh.is_empty() {
                    "(no output yet)\n".to_owned()
                } else {
                    fresh
                }
            }),
        };
        match text {
            Ok(text) => app.set_mode(Mode::Pane(Pane {
                kind,
                task,
                text,
                scroll: match kind {
                    PaneKind::Output => None,
                    _ => Some(0),
                },
            })),
            Err(err) => app.message = Some(format!("refused: {err}")),
        }
    }

    fn start_following(&mut self, task: &RowKey) -> Result<String, CliError> {
        let key =
            crate::commands::resolve::task_key(self.settings, self.source.state(), &name(task))?;
        let mut output = LiveOutput::new(self.source.state(), &task.run_id, &key)?;
        let fresh = String::from_utf8_lossy(&output.read_new()).into_owned();
        self.follow = Some((task.clone(), output));
        Ok(fresh)
    }
}

/// The name the commands take for a task: `PLAN/TASK`, never ambiguous.
fn name(task: &RowKey) -> String {
    format!("{}/{}", task.plan, task.task_id)
}
