//! Who may connect and do what, as flags: the identities (the super user,
//! digest users, SASL users) and the HTTP lock API's bearer tokens and node
//! ACL, and the four-letter words answered to anyone. The decisions are
//! `crate::authority`'s and `crate::auth`'s; this module reads and checks
//! their settings.

use std::path::PathBuf;

use clap::Args;

use super::ConfigError;

/// The identity flags (flattened into [`ServeArgs`](super::ServeArgs)).
#[derive(Debug, Clone, Args)]
pub struct Credentials {
    /// The super user, who passes every ACL check: `user:BASE64HASH`, as
    /// ZooKeeper's superDigest (`warden digest user:password` prints it).
    #[arg(long, value_name = "USER:BASE64HASH", env = "WARDEN_SUPER_DIGEST")]
    pub super_digest: Option<String>,
    /// Users whose passwords digest auth checks: a file of `user:BASE64HASH`
    /// lines (`#` comments). Without it any well-formed user:password is
    /// accepted as that digest identity (ZooKeeper's behaviour).
    #[arg(long, value_name = "FILE", env = "WARDEN_AUTH_USERS")]
    pub auth_users: Option<PathBuf>,
    /// SASL DIGEST-MD5 on the ZooKeeper port: a JAAS file whose `Server`
    /// section lists the users (`user_bob="secret"`, ZooKeeper's
    /// DigestLoginModule), the same file a ZooKeeper server reads. A user
    /// who authenticates gets the identities `sasl:USER` and the digest
    /// identity of that user and password.
    #[arg(long, value_name = "FILE", env = "WARDEN_ZK_SASL_JAAS")]
    pub zk_sasl_jaas: Option<PathBuf>,
}

/// The HTTP lock API's tokens and node ACL, and the four-letter word
/// whitelist (flattened into [`ServeArgs`](super::ServeArgs)).
#[derive(Debug, Clone, Args)]
pub struct AccessArgs {
    /// A bearer token of the HTTP lock API and the digest identity it
    /// stands for (repeatable).
    /// (WARDEN_HTTP_TOKEN holds one; for several, or to keep tokens off
    /// the command line, use --http-token-file.)
    #[arg(
        long = "http-token",
        value_name = "TOKEN=USER:PASSWORD",
        env = "WARDEN_HTTP_TOKEN"
    )]
    pub http_tokens: Vec<String>,
    /// A file of --http-token values, one `TOKEN=USER:PASSWORD` a line
    /// (`#` comments), added to any --http-token.
    #[arg(long, value_name = "FILE", env = "WARDEN_HTTP_TOKEN_FILE")]
    pub http_token_file: Option<PathBuf>,
    /// The ACL of the nodes the HTTP lock API creates, in zkCli's text
    /// form (`digest:svc:HASH:cdrwa,world:anyone:r`); default
    /// world:anyone:cdrwa.
    #[arg(long, value_name = "ACL", env = "WARDEN_HTTP_LOCK_ACL")]
    pub http_lock_acl: Option<String>,
    /// The four-letter words answered to anyone, as ZooKeeper's
    /// `4lw.commands.whitelist`: a comma list (`ruok,srvr,mntr`), `*` for
    /// all. A word off it answers `WORD is not executed because it is not
    /// in the whitelist.`, and its AdminServer command needs the super
    /// user. Default: the words that show no session, client or path and
    /// change nothing (docs/security.md: Who may do what).
    #[arg(
        long = "4lw-whitelist",
        value_name = "WORDS",
        env = "WARDEN_4LW_WHITELIST"
    )]
    pub four_letter_whitelist: Option<String>,
}

/// The checked settings of [`Credentials`] and [`AccessArgs`].
pub(super) struct Access {
    pub auth: crate::auth::AuthConfig,
    pub zk_sasl: Option<std::sync::Arc<crate::sasl::SaslUsers>>,
    pub http_tokens: Vec<(String, String)>,
    pub http_lock_acl: Vec<warden_protocol::pb::Acl>,
    pub four_letter_whitelist: crate::authority::Whitelist,
}

impl Access {
    pub(super) fn check(creds: &Credentials, args: &AccessArgs) -> Result<Access, ConfigError> {
        let auth = crate::auth::AuthConfig::new(
            creds.super_digest.as_deref(),
            creds.auth_users.as_deref(),
        )
        .map_err(ConfigError::Auth)?;
        let zk_sasl = match &creds.zk_sasl_jaas {
            None => None,
            Some(path) => Some(std::sync::Arc::new(
                crate::sasl::jaas::load(path).map_err(ConfigError::Auth)?,
            )),
        };
        let mut token_specs = args.http_tokens.clone();
        if let Some(path) = &args.http_token_file {
            token_specs.extend(read_token_file(path)?);
        }
        let http_tokens = parse_http_tokens(&token_specs)?;
        let http_lock_acl = match &args.http_lock_acl {
            None => Vec::new(),
            Some(text) => warden_protocol::auth::parse_acl(text)
                .map_err(|e| ConfigError::Auth(format!("--http-lock-acl: {e}")))?,
        };
        let four_letter_whitelist = match &args.four_letter_whitelist {
            None => crate::authority::Whitelist::default(),
            Some(text) => crate::authority::Whitelist::parse(text).map_err(ConfigError::Auth)?,
        };
        Ok(Access {
            auth,
            zk_sasl,
            http_tokens,
            http_lock_acl,
            four_letter_whitelist,
        })
    }
}

/// The `TOKEN=USER:PASSWORD` lines of an --http-token-file (blank lines
/// and `#` comments skipped). Its errors name the file and line, never the
/// secret.
fn read_token_file(path: &std::path::Path) -> Result<Vec<String>, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::Auth(format!("--http-token-file {}: {e}", path.display())))?;
    let mut specs = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        parse_http_tokens(&[line.to_string()]).map_err(|e| {
            ConfigError::Auth(format!(
                "--http-token-file {} line {}: {}",
                path.display(),
                n + 1,
                e.to_string().trim_start_matches("--http-token: ")
            ))
        })?;
        specs.push(line.to_string());
    }
    Ok(specs)
}

/// `TOKEN=user:password`, each token once.
fn parse_http_tokens(specs: &[String]) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for spec in specs {
        let bad = |why: &str| ConfigError::Auth(format!("--http-token: {why}"));
        let (token, credentials) = spec
            .split_once('=')
            .ok_or_else(|| bad("expected TOKEN=USER:PASSWORD"))?;
        if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("the token must be non-empty, without spaces"));
        }
        warden_protocol::auth::split_credentials(credentials).map_err(|e| bad(&e.0))?;
        if out.iter().any(|(t, _)| t == token) {
            return Err(bad("a token is given twice"));
        }
        out.push((token.to_string(), credentials.to_string()));
    }
    Ok(out)
}
