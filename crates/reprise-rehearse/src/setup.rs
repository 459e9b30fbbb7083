//! How a rehearsal points one task's agent at the model server: the child's
//! environment, the CLI's own config home, and the files to write there. Pure:
//! the caller writes the files and starts the process.
//!
//! Each task gets a base URL of its own, `http://127.0.0.1:PORT/t/<task>`, so
//! the server can tell tasks apart (scenario rules may name a task, and turns
//! are counted per task), and a home of its own, so no CLI reads the user's
//! real settings, credentials or sessions.

use std::path::{Path, PathBuf};

/// The variable holding the dummy key Codex sends as its bearer token.
pub const CODEX_KEY_VAR: &str = "REPRISE_REHEARSAL_KEY";

/// What every client is given as an API key: the server accepts anything.
pub const DUMMY_KEY: &str = "rehearsal-not-a-real-key";

/// The model Codex is told to use: one whose metadata Codex knows, so its
/// request carries the ordinary tool list (`exec_command`, `apply_patch`, ...).
pub const CODEX_MODEL: &str = "gpt-5.5";

/// Gemini CLI's settings for a rehearsal: the API-key auth type (see
/// [`client_setup`]) and no update checks or usage statistics.
const GEMINI_SETTINGS: &str = "{\n  \"security\": { \"auth\": { \"selectedType\": \"gemini-api-key\" } },\n  \"general\": { \"disableAutoUpdate\": true, \"disableUpdateNag\": true },\n  \"privacy\": { \"usageStatisticsEnabled\": false }\n}\n";

/// The same for Gemini CLI as an ACP agent (`gemini --acp`), with its
/// session clean-up off: 0.61 in ACP mode starts each process under a
/// session id of its own, and its start-up clean-up then deletes the chat
/// files of the sessions it does not take for valid, the one a warm retry
/// is to load among them.
const GEMINI_ACP_SETTINGS: &str = "{\n  \"security\": { \"auth\": { \"selectedType\": \"gemini-api-key\" } },\n  \"general\": { \"disableAutoUpdate\": true, \"disableUpdateNag\": true, \"sessionRetention\": { \"enabled\": false } },\n  \"privacy\": { \"usageStatisticsEnabled\": false }\n}\n";

/// The agent CLI a task runs, as far as rehearsal is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// Claude Code: the Messages API through `ANTHROPIC_BASE_URL`.
    Claude,
    /// Codex: the Responses API through a model provider in its config.
    Codex,
    /// Gemini CLI: the Gemini API through `GOOGLE_GEMINI_BASE_URL`.
    Gemini,
    /// Any other command: given both base URLs and dummy keys.
    Command,
    /// An Agent Client Protocol agent (which may be built on any of the
    /// three APIs): every base URL the server speaks, a dummy key for each,
    /// its own `HOME`, and Gemini CLI's settings there (API-key auth).
    Acp,
}

/// The environment, config home and files for one task's agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientSetup {
    pub env: Vec<(String, String)>,
    /// The CLI's config root (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`).
    pub config_home: Option<PathBuf>,
    /// Files to write before the first attempt: path and contents.
    pub files: Vec<(PathBuf, String)>,
}

/// The base URL a task's Messages client uses (the Responses base adds `/v1`).
pub fn task_base_url(server: &str, task: &str) -> String {
    format!("{}/t/{task}", server.trim_end_matches('/'))
}

/// Points `client`, running `task`, at the server at `server` (its base URL),
/// with `home` as the task's private home directory.
///
/// The clients' own retries are turned off: the server answers a request the
/// same way each time it matches, so a client retry only repeats what the
/// scenario said and makes an error take longer to arrive.
pub fn client_setup(client: Client, server: &str, task: &str, home: &Path) -> ClientSetup {
    let base = task_base_url(server, task);
    let home_var = ("HOME".to_owned(), home.to_string_lossy().into_owned());
    match client {
        Client::Claude => {
            let config_home = home.join(".claude");
            ClientSetup {
                env: vec![
                    home_var,
                    ("ANTHROPIC_BASE_URL".to_owned(), base),
                    ("ANTHROPIC_API_KEY".to_owned(), DUMMY_KEY.to_owned()),
                    (
                        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_owned(),
                        "1".to_owned(),
                    ),
                    ("CLAUDE_CODE_MAX_RETRIES".to_owned(), "0".to_owned()),
                ],
                config_home: Some(config_home),
                files: Vec::new(),
            }
        }
        Client::Codex => {
            let config_home = home.join(".codex");
            let config = codex_config(&format!("{base}/v1"));
            ClientSetup {
                env: vec![home_var, (CODEX_KEY_VAR.to_owned(), DUMMY_KEY.to_owned())],
                files: vec![(config_home.join("config.toml"), config)],
                config_home: Some(config_home),
            }
        }
        Client::Gemini => {
            // The adapter passes the config home as GEMINI_CLI_HOME, the
            // directory holding `.gemini/`. With GOOGLE_GEMINI_BASE_URL set
            // the CLI (0.61) picks the `gateway` auth type, which its own
            // non-interactive check then refuses ("Invalid auth method
            // selected"); naming `gemini-api-key` in its settings keeps the
            // base URL and uses the key from GEMINI_API_KEY.
            ClientSetup {
                env: vec![
                    home_var,
                    ("GOOGLE_GEMINI_BASE_URL".to_owned(), base),
                    ("GEMINI_API_KEY".to_owned(), DUMMY_KEY.to_owned()),
                ],
                config_home: Some(home.to_path_buf()),
                files: vec![(
                    home.join(".gemini/settings.json"),
                    GEMINI_SETTINGS.to_owned(),
                )],
            }
        }
        Client::Command => ClientSetup {
            env: vec![
                ("ANTHROPIC_BASE_URL".to_owned(), base.clone()),
                ("ANTHROPIC_API_KEY".to_owned(), DUMMY_KEY.to_owned()),
                ("OPENAI_BASE_URL".to_owned(), format!("{base}/v1")),
                ("OPENAI_API_KEY".to_owned(), DUMMY_KEY.to_owned()),
            ],
            config_home: None,
            files: Vec::new(),
        },
        Client::Acp => ClientSetup {
            env: vec![
                home_var,
                ("ANTHROPIC_BASE_URL".to_owned(), base.clone()),
                ("ANTHROPIC_API_KEY".to_owned(), DUMMY_KEY.to_owned()),
                ("OPENAI_BASE_URL".to_owned(), format!("{base}/v1")),
                ("OPENAI_API_KEY".to_owned(), DUMMY_KEY.to_owned()),
                ("GOOGLE_GEMINI_BASE_URL".to_owned(), base),
                ("GEMINI_API_KEY".to_owned(), DUMMY_KEY.to_owned()),
            ],
            config_home: None,
            files: vec![(
                home.join(".gemini/settings.json"),
                GEMINI_ACP_SETTINGS.to_owned(),
            )],
        },
    }
}

/// Codex's `config.toml`: a model provider at `base_url` speaking the
/// Responses API, with the dummy key from [`CODEX_KEY_VAR`].
fn codex_config(base_url: &str) -> String {
    format!(
        "# Written by reprise rehearse: every request goes to the scripted model server.\n\
         model_provider = \"rehearsal\"\n\
         model = \"{CODEX_MODEL}\"\n\
         \n\
         [model_providers.rehearsal]\n\
         name = \"reprise rehearsal\"\n\
         base_url = \"{base_url}\"\n\
         wire_api = \"responses\"\n\
         env_key = \"{CODEX_KEY_VAR}\"\n\
         request_max_retries = 0\n\
         stream_max_retries = 0\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value<'a>(setup: &'a ClientSetup, name: &str) -> Option<&'a str> {
        setup
            .env
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    #[test]
    fn claude_gets_a_task_url_a_dummy_key_and_its_own_home() {
        let home = Path::new("/r/homes/add-greeting");
        let setup = client_setup(Client::Claude, "http://127.0.0.1:9/", "add-greeting", home);
        assert_eq!(
            value(&setup, "ANTHROPIC_BASE_URL"),
            Some("http://127.0.0.1:9/t/add-greeting")
        );
        assert_eq!(value(&setup, "ANTHROPIC_API_KEY"), Some(DUMMY_KEY));
        assert_eq!(value(&setup, "HOME"), Some("/r/homes/add-greeting"));
        assert_eq!(
            value(&setup, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"),
            Some("1")
        );
        assert_eq!(setup.config_home, Some(home.join(".claude")));
        assert!(setup.files.is_empty());
    }

    #[test]
    fn codex_gets_a_provider_in_its_own_config() {
        let home = Path::new("/r/homes/t1");
        let setup = client_setup(Client::Codex, "http://127.0.0.1:9", "t1", home);
        assert_eq!(setup.config_home, Some(home.join(".codex")));
        assert_eq!(value(&setup, CODEX_KEY_VAR), Some(DUMMY_KEY));
        let [(path, config)] = setup.files.as_slice() else {
            panic!("one config file: {:?}", setup.files)
        };
        assert_eq!(path, &home.join(".codex/config.toml"));
        assert!(config.contains("model_provider = \"rehearsal\"\n"));
        assert!(config.contains("base_url = \"http://127.0.0.1:9/t/t1/v1\"\n"));
        assert!(config.contains("wire_api = \"responses\"\n"));
        assert!(config.contains(&format!("env_key = \"{CODEX_KEY_VAR}\"\n")));
    }

    #[test]
    fn gemini_gets_its_base_url_a_key_and_the_api_key_auth_type() {
        let home = Path::new("/r/homes/g");
        let setup = client_setup(Client::Gemini, "http://127.0.0.1:9", "g", home);
        assert_eq!(
            value(&setup, "GOOGLE_GEMINI_BASE_URL"),
            Some("http://127.0.0.1:9/t/g")
        );
        assert_eq!(value(&setup, "GEMINI_API_KEY"), Some(DUMMY_KEY));
        assert_eq!(setup.config_home.as_deref(), Some(home));
        let [(path, settings)] = setup.files.as_slice() else {
            panic!("one settings file: {:?}", setup.files)
        };
        assert_eq!(path, &home.join(".gemini/settings.json"));
        let settings: serde_json::Value = serde_json::from_str(settings).unwrap();
        assert_eq!(
            settings["security"]["auth"]["selectedType"],
            "gemini-api-key"
        );
    }

    #[test]
    fn a_command_gets_both_apis_and_keeps_its_home() {
        let setup = client_setup(Client::Command, "http://127.0.0.1:9", "t", Path::new("/h"));
        assert_eq!(
            value(&setup, "OPENAI_BASE_URL"),
            Some("http://127.0.0.1:9/t/t/v1")
        );
        assert_eq!(
            value(&setup, "ANTHROPIC_BASE_URL"),
            Some("http://127.0.0.1:9/t/t")
        );
        assert_eq!(value(&setup, "HOME"), None);
        assert_eq!(setup.config_home, None);
    }

    #[test]
    fn an_acp_agent_gets_every_api_and_its_own_home() {
        let home = Path::new("/h");
        let setup = client_setup(Client::Acp, "http://127.0.0.1:9", "t", home);
        assert_eq!(value(&setup, "HOME"), Some("/h"));
        assert_eq!(
            value(&setup, "ANTHROPIC_BASE_URL"),
            Some("http://127.0.0.1:9/t/t")
        );
        assert_eq!(
            value(&setup, "OPENAI_BASE_URL"),
            Some("http://127.0.0.1:9/t/t/v1")
        );
        assert_eq!(
            value(&setup, "GOOGLE_GEMINI_BASE_URL"),
            Some("http://127.0.0.1:9/t/t")
        );
        for key in ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"] {
            assert_eq!(value(&setup, key), Some(DUMMY_KEY), "{key}");
        }
        assert_eq!(setup.config_home, None);
        assert_eq!(setup.files[0].0, home.join(".gemini/settings.json"));
    }
}
