//! Drawing the watch: the attention list on top, every task below, a line
//! of keys or of the last action's result at the bottom, and a prompt, a
//! pane or the help over them. The same drawing makes `--once`'s frame.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{
    Block, Borders, Cell, Clear, List, ListItem, ListState, Paragraph, Row, Table, TableState, Wrap,
};
use reprise_core::attention::{Place, TaskView};

use crate::commands::spend::spend_text;
use crate::commands::watch::app::{App, Asking, Mode};

/// The key line at the bottom of the board.
const KEYS: &str = "j/k select  a approve  r resume  p pause  s suspend  l output  d diff  Enter details  ? help  q quit";

/// The rows the board needs to show every entry: the frame `--once`
/// prints is this tall.
pub(crate) fn full_height(app: &App) -> u16 {
    let attention = app.board.attention_len().max(1);
    let tasks = app.board.len().max(1);
    u16::try_from(1 + attention + 2 + tasks + 3 + 1).unwrap_or(u16::MAX)
}

/// Draws the whole screen.
pub(crate) fn draw(frame: &mut Frame<'_>, app: &App, now_ms: i64) {
    let area = frame.area();
    let attention = u16::try_from(app.board.attention_len().max(1)).unwrap_or(u16::MAX);
    // The attention list takes what it needs, up to half the screen.
    let attention_height = attention.saturating_add(2).min(area.height / 2).max(3);
    let [header, top, tasks, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(attention_height),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(header_line(app)), header);
    draw_attention(frame, app, top);
    draw_tasks(frame, app, tasks, now_ms);
    let bottom = app.message.clone().unwrap_or_else(|| KEYS.to_owned());
    frame.render_widget(Paragraph::new(bottom), footer);
    match &app.mode {
        Mode::Board => {}
        Mode::Prompt(prompt) => {
            let question = match prompt.asking {
                Asking::ApprovalNote => format!(
                    "Approve the park of {}/{}: a note for the signed approval (optional)",
                    prompt.task.plan, prompt.task.task_id
                ),
                Asking::SuspendReason => format!(
                    "Suspend {}/{}: the reason (optional)",
                    prompt.task.plan, prompt.task.task_id
                ),
            };
            let text = vec![
                Line::from(question),
                Line::from(format!("> {}_", prompt.input)),
                Line::from("Enter confirms, Esc cancels"),
            ];
            let popup = centered(area, 5);
            frame.render_widget(Clear, popup);
            frame.render_widget(
                Paragraph::new(text)
                    .wrap(Wrap { trim: false })
                    .block(Block::default().borders(Borders::ALL).title("confirm")),
                popup,
            );
        }
        Mode::Pane(pane) => {
            let lines = u16::try_from(pane.text.lines().count()).unwrap_or(u16::MAX);
            let inner = area.height.saturating_sub(2);
            let scroll = pane.scroll.unwrap_or_else(|| lines.saturating_sub(inner));
            frame.render_widget(Clear, area);
            frame.render_widget(
                Paragraph::new(pane.text.as_str())
                    .scroll((scroll, 0))
                    .block(Block::default().borders(Borders::ALL).title(format!(
                        "{} of {}/{} (run {})  j/k scroll, G end, Esc back",
                        pane.kind.title(),
                        pane.task.plan,
                        pane.task.task_id,
                        pane.task.run_id
                    ))),
                area,
            );
        }
        Mode::Help => {
            let popup = centered(area, 16);
            frame.render_widget(Clear, popup);
            frame.render_widget(
                Paragraph::new(HELP).block(Block::default().borders(Borders::ALL).title("help")),
                popup,
            );
        }
    }
}

const HELP: &str = "\
up/down, j/k   select a task (the attention list first)
a              approve the selected park (a note, then Enter)
r              resume the selected task in its live run
p              pause the selected task, or unpause it
s              suspend (park) the selected task (a reason, then Enter)
l              the task's live output, as `reprise logs -f`
d              the task's diff, as `reprise diff RUN TASK`
Enter          the task's details, as `reprise task show`
?              this help
q              quit (Esc leaves a pane or this help)

The attention list holds what waits on you or on a time: parks until
approval, permission questions, parks until a resume, usage limits
(with their reset time), then failed and blocked tasks.";

fn header_line(app: &App) -> String {
    let runs: std::collections::BTreeSet<&str> =
        app.board.tasks().map(|task| task.run_id.as_str()).collect();
    format!(
        "reprise watch: {} run{}, {} task{}, {} need{} attention",
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        app.board.len(),
        if app.board.len() == 1 { "" } else { "s" },
        app.board.attention_len(),
        if app.board.attention_len() == 1 {
            "s"
        } else {
            ""
        },
    )
}

fn draw_attention(frame: &mut Frame<'_>, app: &App, area: Rect) {
    let items: Vec<ListItem<'_>> = app
        .board
        .attention()
        .map(|task| {
            let flag = task
                .flag
                .as_ref()
                .expect("the attention list holds flagged tasks");
            // The detail last: a reason can be long, and what wakes the
            // task must stay on screen.
            let detail = flag
                .detail()
                .map(|detail| format!("  ({detail})"))
                .unwrap_or_default();
            ListItem::new(format!(
                "{:<11} {}/{}  run {}  wakes: {}{detail}",
                flag.label(),
                task.plan,
                task.task_id,
                task.run_id,
                flag.wakes(&task.run_id),
            ))
        })
        .collect();
    let empty = items.is_empty();
    let list = if empty {
        List::new(vec![ListItem::new("nothing waits on you")])
    } else {
        List::new(items)
    };
    let mut state = ListState::default();
    if let Some(Place::Attention(at)) = app.board.selected_place() {
        state.select(Some(at));
    }
    frame.render_stateful_widget(
        list.block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!("ATTENTION ({})", app.board.attention_len())),
        )
        .highlight_symbol("> ")
        .highlight_style(Style::default().add_modifier(Modifier::REVERSED)),
        area,
        &mut state,
    );
}

fn draw_tasks(frame: &mut Frame<'_>, app: &App, area: Rect, now_ms: i64) {
    let header = Row::new(["TASK", "RUN", "PHASE", "ATTEMPT", "ELAPSED", "COST", "HOST"])
        .style(Style::default().add_modifier(Modifier::BOLD));
    let rows: Vec<Row<'_>> = app
        .board
        .tasks()
        .map(|task| task_row(task, now_ms))
        .collect();
    let mut state = TableState::default();
    if let Some(Place::Task(at)) = app.board.selected_place() {
        state.select(Some(at));
    }
    let longest = app
        .board
        .tasks()
        .map(|task| task.plan.len() + 1 + task.task_id.len())
        .max()
        .unwrap_or(0);
    let table = Table::new(
        rows,
        [
            Constraint::Length(u16::try_from(longest.clamp(12, 48)).unwrap_or(48)),
            Constraint::Length(28),
            Constraint::Length(16),
            Constraint::Length(7),
            Constraint::Length(8),
            Constraint::Length(18),
            Constraint::Fill(1),
        ],
    )
    .header(header)
    .block(
        Block::default()
            .borders(Borders::ALL)
            .title(format!("TASKS ({})", app.board.len())),
    )
    .highlight_symbol("> ")
    .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    frame.render_stateful_widget(table, area, &mut state);
}

fn task_row(task: &TaskView, now_ms: i64) -> Row<'_> {
    let elapsed = task
        .elapsed_ms(now_ms)
        .map_or_else(|| "-".to_owned(), |ms| elapsed_text(ms / 1000));
    Row::new([
        Cell::from(format!("{}/{}", task.plan, task.task_id)),
        Cell::from(task.run_id.clone()),
        Cell::from(task.phase.clone()),
        Cell::from(if task.attempt == 0 {
            "-".to_owned()
        } else {
            task.attempt.to_string()
        }),
        Cell::from(elapsed),
        // No attempt yet: nothing spent, and nothing to say.
        Cell::from(if task.attempt == 0 && task.spend() == Default::default() {
            "-".to_owned()
        } else {
            spend_text(task.spend())
        }),
        Cell::from(task.host.clone()),
    ])
}

/// `42s`, `3m05s`, `2h10m`.
pub(crate) fn elapsed_text(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60),
    }
}

/// A box `height` rows tall across the middle of `area`.
fn centered(area: Rect, height: u16) -> Rect {
    let height = height.min(area.height);
    let width = area.width.saturating_sub(4).max(10).min(area.width);
    Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    }
}

/// A drawn buffer as plain text: each row's cells, trailing blanks cut.
pub(crate) fn buffer_text(buffer: &ratatui::buffer::Buffer) -> String {
    let area = buffer.area;
    let mut text = String::new();
    for y in area.top()..area.bottom() {
        let mut line = String::new();
        for x in area.left()..area.right() {
            line.push_str(buffer[(x, y)].symbol());
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use reprise_core::attention::{Board, Flag};

    fn app() -> App {
        let mut board = Board::new();
        let view = |task: &str, flag: Option<Flag>, phase: &str| TaskView {
            run_id: "R-01ABC".to_owned(),
            plan: "shop".to_owned(),
            task_id: task.to_owned(),
            phase: phase.to_owned(),
            attempt: 2,
            attempt_started_ms: Some(1_000),
            spent_known_micro_usd: 100_000,
            costs_unknown: 1,
            host: "build-1".to_owned(),
            flag,
            live: true,
        };
        board.update(view("build", None, "running"));
        board.update(view("migrate", Some(Flag::Approval), "suspended"));
        board.update(view(
            "deploy",
            Some(Flag::UsageLimit {
                resets_at: "2026-12-01T18:00:00Z".to_owned(),
            }),
            "suspended",
        ));
        board.select_first();
        App::new(board)
    }

    fn drawn(app: &App, width: u16, height: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|frame| draw(frame, app, 66_000)).unwrap();
        buffer_text(terminal.backend().buffer())
    }

    #[test]
    fn the_attention_list_is_drawn_first_with_its_first_entry_selected() {
        let app = app();
        let text = drawn(&app, 150, full_height(&app));
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("reprise watch: 1 run, 3 tasks, 2 need attention"),
            "{text}"
        );
        assert!(lines[1].contains("ATTENTION (2)"), "{text}");
        assert!(
            lines[2].contains(
                "> approval    shop/migrate  run R-01ABC  wakes: approve (a), then resume (r)"
            ),
            "{text}"
        );
        assert!(
            lines[3].contains(
                "usage limit shop/deploy  run R-01ABC  wakes: wakes by itself at 2026-12-01T18:00:00Z; sooner: resume (r)  (resets at 2026-12-01T18:00:00Z)"
            ),
            "{text}"
        );
        assert!(lines[5].contains("TASKS (3)"), "{text}");
        let build = lines
            .iter()
            .find(|line| line.contains("shop/build"))
            .unwrap();
        // Elapsed from the attempt's start; the cost with its unknown part.
        assert!(build.contains("running"), "{build}");
        assert!(build.contains("1m05s"), "{build}");
        assert!(build.contains("$0.10 + 1 unknown"), "{build}");
        assert!(build.contains("build-1"), "{build}");
        assert!(text.contains("q quit"), "{text}");
    }

    #[test]
    fn a_prompt_and_the_help_are_drawn_over_the_board() {
        let mut app = app();
        app.set_mode(Mode::Prompt(crate::commands::watch::app::Prompt {
            asking: Asking::ApprovalNote,
            task: app.board.selected().unwrap().key(),
            input: "ok".to_owned(),
        }));
        let text = drawn(&app, 120, 20);
        assert!(text.contains("Approve the park of shop/migrate"), "{text}");
        assert!(text.contains("> ok_"), "{text}");
        app.set_mode(Mode::Help);
        let text = drawn(&app, 120, 24);
        assert!(text.contains("approve the selected park"), "{text}");
    }

    #[test]
    fn any_terminal_size_draws_every_mode() {
        let mut app = app();
        let task = app.board.selected().unwrap().key();
        let modes = [
            Mode::Board,
            Mode::Help,
            Mode::Prompt(crate::commands::watch::app::Prompt {
                asking: Asking::SuspendReason,
                task: task.clone(),
                input: "why".to_owned(),
            }),
            Mode::Pane(crate::commands::watch::app::Pane {
                kind: crate::commands::watch::app::PaneKind::Output,
                task,
                text: "line\n".repeat(100),
                scroll: None,
            }),
        ];
        for mode in modes {
            app.set_mode(mode);
            for (width, height) in [(1, 1), (12, 4), (40, 8), (80, 24), (200, 60)] {
                let text = drawn(&app, width, height);
                assert_eq!(text.lines().count(), usize::from(height));
            }
        }
    }

    #[test]
    fn elapsed_times_read_in_the_largest_units() {
        assert_eq!(elapsed_text(42), "42s");
        assert_eq!(elapsed_text(185), "3m05s");
        assert_eq!(elapsed_text(7800), "2h10m");
    }
}
