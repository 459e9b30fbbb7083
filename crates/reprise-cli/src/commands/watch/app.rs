//! The watch's screen state and what each key does to it: pure, so a test
//! drives it with key presses and reads back the effect asked for. The
//! effects themselves (approve, resume, ...) are performed by `mod.rs`
//! through the commands' own functions.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use reprise_core::attention::{Board, RowKey};

/// What the screen shows over the board.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Mode {
    #[default]
    Board,
    /// Asking for text before an action: a note for an approval, a reason
    /// for a park.
    Prompt(Prompt),
    /// A task's details, diff or live output, scrolled.
    Pane(Pane),
    Help,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Prompt {
    pub(crate) asking: Asking,
    pub(crate) task: RowKey,
    pub(crate) input: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asking {
    /// An optional note kept in the signed approval.
    ApprovalNote,
    /// An optional reason for the park.
    SuspendReason,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pane {
    pub(crate) kind: PaneKind,
    pub(crate) task: RowKey,
    pub(crate) text: String,
    /// The first line shown; `None` follows the end (live output).
    pub(crate) scroll: Option<u16>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PaneKind {
    Details,
    Diff,
    Output,
}

impl PaneKind {
    pub(crate) fn title(self) -> &'static str {
        match self {
            Self::Details => "details",
            Self::Diff => "diff",
            Self::Output => "live output",
        }
    }
}

/// What a key asks the watch to do beyond its own screen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Effect {
    Approve {
        task: RowKey,
        note: Option<String>,
    },
    Resume {
        task: RowKey,
    },
    /// Pause a running task, or let a paused one go on.
    PauseOrUnpause {
        task: RowKey,
        paused: bool,
    },
    Suspend {
        task: RowKey,
        reason: Option<String>,
    },
    /// Open a pane of the task: its text comes from the effect.
    Open {
        task: RowKey,
        kind: PaneKind,
    },
}

/// The watch's state: the board and what is drawn over it.
#[derive(Debug, Default)]
pub(crate) struct App {
    pub(crate) board: Board,
    pub(crate) mode: Mode,
    /// The last action's result, one line.
    pub(crate) message: Option<String>,
    pub(crate) quit: bool,
}

impl App {
    pub(crate) fn new(board: Board) -> Self {
        Self {
            board,
            ..Self::default()
        }
    }

    pub(crate) fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
    }

    /// Handles one key; returns the effect it asks for, if any.
    pub(crate) fn on_key(&mut self, key: KeyEvent) -> Option<Effect> {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            self.quit = true;
            return None;
        }
        match self.mode.clone() {
            Mode::Board => self.on_board_key(key),
            Mode::Prompt(prompt) => self.on_prompt_key(prompt, key),
            Mode::Pane(pane) => {
                self.on_pane_key(pane, key);
                None
            }
            Mode::Help => {
                if matches!(key.code, KeyCode::Char('q')) {
                    self.quit = true;
                } else {
                    self.set_mode(Mode::Board);
                }
                None
            }
        }
    }

    fn on_board_key(&mut self, key: KeyEvent) -> Option<Effect> {
        let selected = self.board.selected().cloned();
        let task = selected.as_ref().map(|view| view.key());
        match key.code {
            KeyCode::Char('q') => self.quit = true,
            KeyCode::Down | KeyCode::Char('j') => self.board.select_next(),
            KeyCode::Up | KeyCode::Char('k') => self.board.select_previous(),
            KeyCode::Char('?') => self.set_mode(Mode::Help),
            KeyCode::Char('a') => {
                let task = self.need(task, "approve")?;
                self.set_mode(Mode::Prompt(Prompt {
                    asking: Asking::ApprovalNote,
                    task,
                    input: String::new(),
                }));
            }
            KeyCode::Char('s') => {
                let task = self.need(task, "suspend")?;
                self.set_mode(Mode::Prompt(Prompt {
                    asking: Asking::SuspendReason,
                    task,
                    input: String::new(),
                }));
            }
            KeyCode::Char('r') => {
                return Some(Effect::Resume {
                    task: self.need(task, "resume")?,
                });
            }
            KeyCode::Char('p') => {
                let paused = selected.as_ref().is_some_and(|view| view.phase == "paused");
                return Some(Effect::PauseOrUnpause {
                    task: self.need(task, "pause")?,
                    paused,
                });
            }
            KeyCode::Char('l') => {
                return Some(Effect::Open {
                    task: self.need(task, "follow")?,
                    kind: PaneKind::Output,
                });
            }
            KeyCode::Char('d') => {
                return Some(Effect::Open {
                    task: self.need(task, "diff")?,
                    kind: PaneKind::Diff,
                });
            }
            KeyCode::Enter => {
                return Some(Effect::Open {
                    task: self.need(task, "show")?,
                    kind: PaneKind::Details,
                });
            }
            _ => {}
        }
        None
    }

    /// The selected task, or a message that there is none.
    fn need(&mut self, task: Option<RowKey>, what: &str) -> Option<RowKey> {
        if task.is_none() {
            self.message = Some(format!("no task to {what}: no run is being watched"));
        }
        task
    }

    fn on_prompt_key(&mut self, mut prompt: Prompt, key: KeyEvent) -> Option<Effect> {
        match key.code {
            KeyCode::Esc => {
                self.message = Some("cancelled".to_owned());
                self.set_mode(Mode::Board);
            }
            KeyCode::Enter => {
                self.set_mode(Mode::Board);
                let text = Some(prompt.input.trim().to_owned()).filter(|text| !text.is_empty());
                return Some(match prompt.asking {
                    Asking::ApprovalNote => Effect::Approve {
                        task: prompt.task,
                        note: text,
                    },
                    Asking::SuspendReason => Effect::Suspend {
                        task: prompt.task,
                        reason: text,
                    },
                });
            }
            KeyCode::Backspace => {
                prompt.input.pop();
                self.set_mode(Mode::Prompt(prompt));
            }
            KeyCode::Char(c) => {
                prompt.input.push(c);
                self.set_mode(Mode::Prompt(prompt));
            }
            _ => {}
        }
        None
    }

    fn on_pane_key(&mut self, mut pane: Pane, key: KeyEvent) {
        let lines = u16::try_from(pane.text.lines().count()).unwrap_or(u16::MAX);
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => self.set_mode(Mode::Board),
            KeyCode::Down | KeyCode::Char('j') => {
                let at = pane.scroll.unwrap_or_else(|| lines.saturating_sub(1));
                pane.scroll = Some(at.saturating_add(1).min(lines.saturating_sub(1)));
                self.set_mode(Mode::Pane(pane));
            }
            KeyCode::Up | KeyCode::Char('k') => {
                let at = pane.scroll.unwrap_or_else(|| lines.saturating_sub(1));
                pane.scroll = Some(at.saturating_sub(1));
                self.set_mode(Mode::Pane(pane));
            }
            KeyCode::End | KeyCode::Char('G') => {
                pane.scroll = None;
                self.set_mode(Mode::Pane(pane));
            }
            _ => {}
        }
    }

    /// Appends live output to the open output pane of `task`.
    pub(crate) fn append_output(&mut self, task: &RowKey, text: &str) {
        if let Mode::Pane(pane) = &mut self.mode
            && pane.kind == PaneKind::Output
            && pane.task == *task
        {
            pane.text.push_str(text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reprise_core::attention::{Flag, TaskView};

    fn press(app: &mut App, code: KeyCode) -> Option<Effect> {
        app.on_key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    fn board() -> Board {
        let mut board = Board::new();
        for (task, flag) in [("gate", Some(Flag::Approval)), ("slow", None)] {
            board.update(TaskView {
                run_id: "R-1".to_owned(),
                plan: "p".to_owned(),
                task_id: task.to_owned(),
                phase: if flag.is_some() {
                    "suspended"
                } else {
                    "running"
                }
                .to_owned(),
                attempt: 1,
                attempt_started_ms: None,
                spent_known_micro_usd: 0,
                costs_unknown: 1,
                host: "here".to_owned(),
                flag,
                live: true,
            });
        }
        board.select_first();
        board
    }

    #[test]
    fn a_approves_the_selected_park_with_the_note_typed_and_enter() {
        let mut app = App::new(board());
        assert_eq!(press(&mut app, KeyCode::Char('a')), None);
        assert!(matches!(&app.mode, Mode::Prompt(_)));
        for c in "looks right".chars() {
            assert_eq!(press(&mut app, KeyCode::Char(c)), None);
        }
        let effect = press(&mut app, KeyCode::Enter).unwrap();
        assert_eq!(
            effect,
            Effect::Approve {
                task: RowKey {
                    run_id: "R-1".to_owned(),
                    plan: "p".to_owned(),
                    task_id: "gate".to_owned()
                },
                note: Some("looks right".to_owned())
            }
        );
        assert_eq!(&app.mode, &Mode::Board);
        // `q` typed into a prompt is text, not a quit.
        press(&mut app, KeyCode::Char('s'));
        press(&mut app, KeyCode::Char('q'));
        assert!(!app.quit);
        press(&mut app, KeyCode::Esc);
        assert_eq!(&app.mode, &Mode::Board);
    }

    #[test]
    fn keys_select_resume_pause_open_and_quit() {
        let mut app = App::new(board());
        assert!(matches!(
            press(&mut app, KeyCode::Char('r')),
            Some(Effect::Resume { task }) if task.task_id == "gate"
        ));
        press(&mut app, KeyCode::Char('j'));
        assert!(matches!(
            press(&mut app, KeyCode::Char('p')),
            Some(Effect::PauseOrUnpause { task, paused: false }) if task.task_id == "slow"
        ));
        assert!(matches!(
            press(&mut app, KeyCode::Char('l')),
            Some(Effect::Open {
                kind: PaneKind::Output,
                ..
            })
        ));
        assert!(matches!(
            press(&mut app, KeyCode::Char('d')),
            Some(Effect::Open {
                kind: PaneKind::Diff,
                ..
            })
        ));
        assert!(matches!(
            press(&mut app, KeyCode::Enter),
            Some(Effect::Open {
                kind: PaneKind::Details,
                ..
            })
        ));
        press(&mut app, KeyCode::Up);
        assert_eq!(app.board.selected().unwrap().task_id, "gate");
        press(&mut app, KeyCode::Char('?'));
        assert_eq!(&app.mode, &Mode::Help);
        press(&mut app, KeyCode::Esc);
        assert!(!app.quit);
        press(&mut app, KeyCode::Char('q'));
        assert!(app.quit);
    }
}
