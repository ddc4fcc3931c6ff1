//! JAAS login configuration files, as Java reads them, for the one thing
//! Warden takes from them: the `Server` section's `user_NAME="password"`
//! options (ZooKeeper's DigestLoginModule), the SASL users of the
//! ZooKeeper port. The same file a ZooKeeper server is given works:
//!
//! ```text
//! Server {
//!   org.apache.zookeeper.server.auth.DigestLoginModule required
//!   user_super="adminsecret"
//!   user_bob="secret";
//! };
//! // Other sections (Client, KafkaServer, ...) are read and ignored.
//! ```
//!
//! The grammar: sections `Name { entry; ... };`, each entry a login
//! module's class, a control flag and `key=value` options, values quoted
//! (with `\` escapes) or bare words; `//`, `/* */` and `#` comments.

use std::collections::BTreeMap;
use std::path::Path;

use super::SaslUsers;

/// The section ZooKeeper reads (its `zookeeper.sasl.serverconfig`
/// default).
pub const SERVER_SECTION: &str = "Server";
/// Largest JAAS file read, in bytes.
pub const JAAS_FILE_BYTES_MAX: u64 = 1024 * 1024;
const USER_PREFIX: &str = "user_";

/// One login module entry of a section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub module: String,
    pub flag: String,
    pub options: Vec<(String, String)>,
}

/// Reads `--zk-sasl-jaas FILE`: the users of its `Server` section.
pub fn load(path: &Path) -> Result<SaslUsers, String> {
    let what = |e: &dyn std::fmt::Display| format!("--zk-sasl-jaas {}: {e}", path.display());
    let len = std::fs::metadata(path).map_err(|e| what(&e))?.len();
    if len > JAAS_FILE_BYTES_MAX {
        return Err(what(&format_args!(
            "{len} bytes exceeds the limit of {JAAS_FILE_BYTES_MAX}"
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| what(&e))?;
    server_users(&text).map_err(|e| what(&e))
}

/// The `user_NAME="password"` options of every module of the `Server`
/// section.
pub fn server_users(text: &str) -> Result<SaslUsers, String> {
    let sections = parse(text)?;
    let Some(entries) = sections.get(SERVER_SECTION) else {
        let found: Vec<&str> = sections.keys().map(String::as_str).collect();
        return Err(format!(
            "no {SERVER_SECTION} section (found: {})",
            if found.is_empty() {
                "none".to_string()
            } else {
                found.join(", ")
            }
        ));
    };
    let mut users = BTreeMap::new();
    for entry in entries {
        for (key, value) in &entry.options {
            let Some(user) = key.strip_prefix(USER_PREFIX) else {
                continue;
            };
            if user.is_empty() {
                return Err(format!("{SERVER_SECTION}: option {key:?} names no user"));
            }
            if users.insert(user.to_string(), value.clone()).is_some() {
                return Err(format!("{SERVER_SECTION}: user {user:?} is listed twice"));
            }
        }
    }
    if users.is_empty() {
        return Err(format!(
            "the {SERVER_SECTION} section has no user_NAME=\"password\" option \
             (ZooKeeper's DigestLoginModule); only DIGEST-MD5 is supported, not Kerberos"
        ));
    }
    Ok(SaslUsers::new(users))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Quoted(String),
    Sym(char),
}

/// Every section of a JAAS file: name -> its entries.
pub fn parse(text: &str) -> Result<BTreeMap<String, Vec<Entry>>, String> {
    let tokens = tokenize(text)?;
    let mut it = tokens.into_iter().peekable();
    let mut sections: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
    let expected = |line: usize, want: &str, got: Option<&Token>| match got {
        None => format!("line {line}: expected {want}, found the end of the file"),
        Some(t) => format!("line {line}: expected {want}, found {}", show(t)),
    };
    while let Some((line, token)) = it.next() {
        let Token::Word(name) = token else {
            return Err(expected(line, "a section name", Some(&token)));
        };
        match it.next() {
            Some((_, Token::Sym('{'))) => {}
            other => {
                let line = other.as_ref().map_or(line, |(l, _)| *l);
                return Err(expected(
                    line,
                    "`{` after the section name",
                    other.as_ref().map(|(_, t)| t),
                ));
            }
        }
        let mut entries = Vec::new();
        loop {
            let (line, token) = it
                .next()
                .ok_or_else(|| expected(line, "a login module or `}`", None))?;
            let module = match token {
                Token::Sym('}') => break,
                Token::Word(w) => w,
                t => return Err(expected(line, "a login module or `}`", Some(&t))),
            };
            let flag = match it.next() {
                Some((_, Token::Word(w))) => w,
                other => {
                    let line = other.as_ref().map_or(line, |(l, _)| *l);
                    return Err(expected(
                        line,
                        "a control flag (required, requisite, sufficient, optional)",
                        other.as_ref().map(|(_, t)| t),
                    ));
                }
            };
            let mut options = Vec::new();
            loop {
                match it.next() {
                    Some((_, Token::Sym(';'))) => break,
                    Some((line, Token::Word(key))) => {
                        match it.next() {
                            Some((_, Token::Sym('='))) => {}
                            other => {
                                return Err(expected(
                                    line,
                                    &format!("`=` after option {key}"),
                                    other.as_ref().map(|(_, t)| t),
                                ))
                            }
                        }
                        match it.next() {
                            Some((_, Token::Quoted(v) | Token::Word(v))) => options.push((key, v)),
                            other => {
                                return Err(expected(
                                    line,
                                    &format!("a value for option {key}"),
                                    other.as_ref().map(|(_, t)| t),
                                ))
                            }
                        }
                    }
                    other => {
                        return Err(expected(
                            other.as_ref().map_or(line, |(l, _)| *l),
                            "an option or `;`",
                            other.as_ref().map(|(_, t)| t),
                        ))
                    }
                }
            }
            entries.push(Entry {
                module,
                flag,
                options,
            });
        }
        match it.next() {
            Some((_, Token::Sym(';'))) => {}
            other => {
                return Err(expected(
                    other.as_ref().map_or(line, |(l, _)| *l),
                    &format!("`;` after section {name}"),
                    other.as_ref().map(|(_, t)| t),
                ))
            }
        }
        if sections.insert(name.clone(), entries).is_some() {
            return Err(format!("line {line}: section {name} appears twice"));
        }
    }
    Ok(sections)
}

fn show(t: &Token) -> String {
    match t {
        Token::Word(w) => format!("{w:?}"),
        Token::Quoted(_) => "a quoted string".to_string(),
        Token::Sym(c) => format!("`{c}`"),
    }
}

/// Tokens with their line numbers.
fn tokenize(text: &str) -> Result<Vec<(usize, Token)>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line = 1;
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            c if c.is_whitespace() => {}
            '#' => {
                while chars.peek().is_some_and(|&c| c != '\n') {
                    chars.next();
                }
            }
            '/' if chars.peek() == Some(&'/') => {
                while chars.peek().is_some_and(|&c| c != '\n') {
                    chars.next();
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let start = line;
                let mut prev = ' ';
                loop {
                    match chars.next() {
                        None => return Err(format!("line {start}: comment never closed")),
                        Some('/') if prev == '*' => break,
                        Some(c) => {
                            if c == '\n' {
                                line += 1;
                            }
                            prev = c;
                        }
                    }
                }
            }
            '{' | '}' | ';' | '=' => out.push((line, Token::Sym(c))),
            '"' => {
                let start = line;
                let mut s = String::new();
                loop {
                    match chars.next() {
                        None => return Err(format!("line {start}: quoted string never closed")),
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            None => {
                                return Err(format!("line {start}: quoted string never closed"))
                            }
                            Some(c) => s.push(c),
                        },
                        Some(c) => {
                            if c == '\n' {
                                line += 1;
                            }
                            s.push(c);
                        }
                    }
                }
                out.push((start, Token::Quoted(s)));
            }
            c if is_word(c) => {
                let mut w = String::from(c);
                while chars.peek().is_some_and(|&c| is_word(c)) {
                    w.push(chars.next().expect("peeked"));
                }
                out.push((line, Token::Word(w)));
            }
            other => {
                return Err(format!(
                    "line {line}: unexpected character {:?}",
                    other.escape_debug().to_string()
                ))
            }
        }
    }
    Ok(out)
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | '$' | '/' | ':' | '@' | '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZK_STYLE: &str = r#"
// The file a ZooKeeper ensemble and its clients share.
Server {
       org.apache.zookeeper.server.auth.DigestLoginModule required
       user_super="adminsecret"
       user_bob="secret";
};
/* a client's
   section */
Client {
       org.apache.zookeeper.server.auth.DigestLoginModule required
       username="bob"
       password="secret";
};
# Kafka's own sections are read and ignored.
KafkaServer { org.apache.kafka.common.security.plain.PlainLoginModule required
  username=admin password="a \"quoted\" pw"; };
"#;

    #[test]
    fn reads_zookeepers_server_section() {
        let users = server_users(ZK_STYLE).unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(users.password("bob"), Some("secret"));
        assert_eq!(users.password("super"), Some("adminsecret"));
        assert_eq!(users.password("username"), None);
        let sections = parse(ZK_STYLE).unwrap();
        let kafka = &sections["KafkaServer"][0];
        assert_eq!(kafka.flag, "required");
        assert_eq!(
            kafka.options,
            vec![
                ("username".to_string(), "admin".to_string()),
                ("password".to_string(), "a \"quoted\" pw".to_string())
            ]
        );
    }

    #[test]
    fn bad_files_say_what_and_where() {
        let cases = [
            (
                "Client { m required username=\"bob\"; };",
                "no Server section (found: Client)",
            ),
            ("", "no Server section (found: none)"),
            ("Server { m required; };", "no user_NAME"),
            (
                "Server { m required user_bob=\"a\" user_bob=\"b\"; };",
                "listed twice",
            ),
            ("Server { m required user_=\"a\"; };", "names no user"),
            (
                "Server {\n m required\n user_bob \"secret\"; };",
                "line 3: expected `=` after option user_bob",
            ),
            (
                "Server {\n m required user_bob=\"secret\n",
                "line 2: quoted string never closed",
            ),
            (
                "Server { m required user_bob=\"s\"; }",
                "expected `;` after section Server",
            ),
            (
                "Server { m required user_bob=\"s\" }; ",
                "expected an option or `;`",
            ),
            (
                "Server { m required user_bob=\"s\"; };\nServer { m required user_x=\"s\"; };",
                "line 2: section Server appears twice",
            ),
            ("/* open", "comment never closed"),
            ("Server ( };", "unexpected character"),
        ];
        for (text, want) in cases {
            let err = server_users(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn load_names_the_flag_and_file() {
        let err = load(Path::new("/nonexistent/jaas.conf")).unwrap_err();
        assert!(
            err.starts_with("--zk-sasl-jaas /nonexistent/jaas.conf: "),
            "{err}"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("jaas.conf");
        std::fs::write(&path, ZK_STYLE).unwrap();
        assert_eq!(load(&path).unwrap().password("bob"), Some("secret"));
    }
}
