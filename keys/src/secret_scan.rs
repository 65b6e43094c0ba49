//! The secret scan of sealed fields: whether a text about to be sealed holds what looks like a
//! credential, by rules a deployment may extend or trim (`[privacy] secret_scan`,
//! `secret_rules`, `secret_rules_disabled`).
//!
//! It lives beside [`crate::sensitive_fields`], which says which fields are texts, and is
//! called by the one place every writer seals through (the producer's `EventLog`), so ingest,
//! the Rust library and everything built on them meet it. It is pure: rules in, findings out;
//! what is done about a finding (withheld and redacted, or a warning) is the sealing path's.
//!
//! Matching is linear in the text: one pass of an Aho-Corasick automaton over every rule's
//! keywords (a rule runs only on a text holding one of its keywords, as gitleaks does), then
//! the `regex` crate's expressions, which never backtrack, for the rules it woke.

use crate::{Error, Result, sensitive_fields};
use aho_corasick::AhoCorasick;
use regex::{Regex, RegexBuilder};
use serde::Serialize;
use sessionlog_log::{PrivacySettings, SecretScanMode};
use sessionlog_schemas::{Content, EventEnvelope, Seq, SessionId};

/// The largest compiled expression a rule may have: a deployment's own rule cannot make the
/// scan of every append cost memory without bound.
const RULE_SIZE_LIMIT: usize = 10 << 20;

/// A built-in rule: its id, its expression, the Shannon entropy its secret must reach, and
/// words one of which the text must hold for the expression to run.
struct BuiltIn {
    id: &'static str,
    regex: &'static str,
    entropy: Option<f64>,
    keywords: &'static [&'static str],
    /// A secret matching this is an example, not a credential.
    allow: Option<&'static str>,
}

/// The built-in rules. Those marked *gitleaks* are rules of gitleaks' default configuration
/// (`config/gitleaks.toml`, gitleaks v8, commit b58d3f1; MIT License, Copyright (c) 2019
/// Zachary Rice), kept as data with their ids, expressions, entropies, keywords and
/// allowlists; the others are ours, for shapes gitleaks leaves to its generic rule. Word
/// boundaries are written `(?-u:\b)`: ASCII ones, as Go's `\b` in gitleaks is (a Unicode `\b`
/// also sends the regex crate to its slow engine on any non-ASCII text).
const BUILT_IN: &[BuiltIn] = &[
    // gitleaks
    BuiltIn {
        id: "aws-access-token",
        regex: r"(?-u:\b)((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16})(?-u:\b)",
        entropy: Some(3.0),
        keywords: &["a3t", "akia", "asia", "abia", "acca"],
        allow: Some(r".+EXAMPLE$"),
    },
    // ours: the secret half of an AWS key pair, where it is named (40 characters of base64
    // alone are too common to take for one).
    BuiltIn {
        id: "aws-secret-access-key",
        regex: r#"(?i)aws_?secret_?(?:access_?)?key(?:_?id)?["']?\s*(?:=|:|=>)\s*["']?([A-Za-z0-9/+=]{40})(?-u:\b)"#,
        entropy: Some(3.5),
        keywords: &[
            "aws_secret",
            "awssecret",
            "aws_secret_access_key",
            "secretaccesskey",
        ],
        allow: Some(r"EXAMPLEKEY$"),
    },
    // gitleaks: PEM private keys, also inside a JSON string with its newlines escaped (a GCP
    // service account's key file).
    BuiltIn {
        id: "private-key",
        regex: r"(?i)-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----[\s\S-]{64,}?KEY(?: BLOCK)?-----",
        entropy: None,
        keywords: &["-----begin"],
        allow: None,
    },
    // gitleaks
    BuiltIn {
        id: "gcp-api-key",
        regex: r#"(?-u:\b)(AIza[\w-]{35})(?:[\x60'"\s;]|\\[nr]|$)"#,
        entropy: Some(4.0),
        keywords: &["aiza"],
        allow: None,
    },
    // gitleaks
    BuiltIn {
        id: "jwt",
        regex: r#"(?-u:\b)(ey[a-zA-Z0-9]{17,}\.ey[a-zA-Z0-9/\\_-]{17,}\.(?:[a-zA-Z0-9/\\_-]{10,}={0,2})?)(?:[\x60'"\s;]|\\[nr]|$)"#,
        entropy: Some(3.0),
        keywords: &["ey"],
        allow: None,
    },
    // ours: an opaque bearer token in an Authorization header or a curl command.
    BuiltIn {
        id: "bearer-token",
        regex: r"(?i)(?-u:\b)bearer[ \t]+([a-z0-9._~+/-]{20,}=*)",
        entropy: Some(3.0),
        keywords: &["bearer"],
        allow: None,
    },
    // ours: a URL or connection string carrying a password (`postgres://user:pw@host/db`).
    BuiltIn {
        id: "connection-string-password",
        regex: r"(?i)(?-u:\b)[a-z][a-z0-9+.-]{1,30}://[^\s:/@]{1,256}:([^\s@/]{3,256})@[a-z0-9._-]{1,256}",
        entropy: Some(2.0),
        keywords: &["://"],
        allow: Some(
            r"(?i)^(?:\*+|x+|password|passwd|pass|secret|changeme|\$\{?[a-z_]+\}?|<[^>]*>)$",
        ),
    },
    // gitleaks
    BuiltIn {
        id: "github-pat",
        regex: r"ghp_[0-9a-zA-Z]{36}",
        entropy: Some(3.0),
        keywords: &["ghp_"],
        allow: None,
    },
    // gitleaks
    BuiltIn {
        id: "github-fine-grained-pat",
        regex: r"github_pat_\w{82}",
        entropy: Some(3.0),
        keywords: &["github_pat_"],
        allow: None,
    },
    // gitleaks
    BuiltIn {
        id: "github-oauth",
        regex: r"gho_[0-9a-zA-Z]{36}",
        entropy: Some(3.0),
        keywords: &["gho_"],
        allow: None,
    },
    // gitleaks
    BuiltIn {
        id: "github-app-token",
        regex: r"(?:ghu|ghs)_[0-9a-zA-Z]{36}",
        entropy: Some(3.0),
        keywords: &["ghu_", "ghs_"],
        allow: None,
    },
    // gitleaks
    BuiltIn {
        id: "github-refresh-token",
        regex: r"ghr_[0-9a-zA-Z]{36}",
        entropy: Some(3.0),
        keywords: &["ghr_"],
        allow: None,
    },
    // gitleaks
    BuiltIn {
        id: "gitlab-pat",
        regex: r"glpat-[\w-]{20}",
        entropy: Some(3.0),
        keywords: &["glpat-"],
        allow: None,
    },
    // gitleaks
    BuiltIn {
        id: "slack-bot-token",
        regex: r"xoxb-[0-9]{10,13}-[0-9]{10,13}[a-zA-Z0-9-]*",
        entropy: Some(3.0),
        keywords: &["xoxb"],
        allow: None,
    },
    // gitleaks
    BuiltIn {
        id: "slack-user-token",
        regex: r"xox[pe](?:-[0-9]{10,13}){3}-[a-zA-Z0-9-]{28,34}",
        entropy: Some(2.0),
        keywords: &["xoxp-", "xoxe-"],
        allow: None,
    },
    // gitleaks
    BuiltIn {
        id: "slack-app-token",
        regex: r"(?i)xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+",
        entropy: Some(2.0),
        keywords: &["xapp"],
        allow: None,
    },
    // gitleaks
    BuiltIn {
        id: "slack-webhook-url",
        regex: r"(?:https?://)?hooks.slack.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{43,56}",
        entropy: None,
        keywords: &["hooks.slack.com"],
        allow: None,
    },
    // gitleaks
    BuiltIn {
        id: "openai-api-key",
        regex: r#"(?-u:\b)(sk-(?:proj|svcacct|admin)-(?:[A-Za-z0-9_-]{74}|[A-Za-z0-9_-]{58})T3BlbkFJ(?:[A-Za-z0-9_-]{74}|[A-Za-z0-9_-]{58})(?-u:\b)|sk-[a-zA-Z0-9]{20}T3BlbkFJ[a-zA-Z0-9]{20})(?:[\x60'"\s;]|\\[nr]|$)"#,
        entropy: Some(3.0),
        keywords: &["t3blbkfj"],
        allow: None,
    },
    // gitleaks
    BuiltIn {
        id: "anthropic-api-key",
        regex: r#"(?-u:\b)(sk-ant-api03-[a-zA-Z0-9_\-]{93}AA)(?:[\x60'"\s;]|\\[nr]|$)"#,
        entropy: None,
        keywords: &["sk-ant-api03"],
        allow: None,
    },
    // gitleaks
    BuiltIn {
        id: "stripe-access-token",
        regex: r#"(?-u:\b)((?:sk|rk)_(?:test|live|prod)_[a-zA-Z0-9]{10,99})(?:[\x60'"\s;]|\\[nr]|$)"#,
        entropy: Some(2.0),
        keywords: &[
            "sk_test", "sk_live", "sk_prod", "rk_test", "rk_live", "rk_prod",
        ],
        allow: None,
    },
    // gitleaks
    BuiltIn {
        id: "npm-access-token",
        regex: r#"(?i)(?-u:\b)(npm_[a-z0-9]{36})(?:[\x60'"\s;]|\\[nr]|$)"#,
        entropy: Some(2.0),
        keywords: &["npm_"],
        allow: None,
    },
];

/// The ids of the built-in rules.
pub fn built_in_rule_ids() -> impl Iterator<Item = &'static str> {
    BUILT_IN.iter().map(|rule| rule.id)
}

/// One rule, compiled.
struct Rule {
    id: String,
    regex: Regex,
    entropy: Option<f64>,
    allow: Option<Regex>,
}

impl Rule {
    /// Whether `text` holds a secret by this rule: a match whose secret (its first capture
    /// group, else the whole match) is not an allowed example and reaches the rule's entropy.
    fn finds(&self, text: &str) -> bool {
        self.regex.captures_iter(text).any(|captures| {
            let secret = captures
                .get(1)
                .or_else(|| captures.get(0))
                .map_or("", |m| m.as_str());
            !secret.is_empty()
                && self
                    .allow
                    .as_ref()
                    .is_none_or(|allow| !allow.is_match(secret))
                && self
                    .entropy
                    .is_none_or(|least| shannon_entropy(secret) >= least)
        })
    }
}

/// Shannon entropy of `text` in bits per byte: how far it is from a repeated or patterned
/// placeholder (`AKIAAAAAAAAAAAAAAAAA` has almost none).
fn shannon_entropy(text: &str) -> f64 {
    let mut counts = [0u32; 256];
    for byte in text.bytes() {
        counts[usize::from(byte)] += 1;
    }
    let len = text.len() as f64;
    counts
        .iter()
        .filter(|&&count| count > 0)
        .map(|&count| {
            let p = f64::from(count) / len;
            -p * p.log2()
        })
        .sum()
}

/// What was done about a secret found in a field about to be sealed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretAction {
    /// Written without its text, and redacted (`[privacy] secret_scan = "redact"`).
    Redacted,
    /// Written sealed as usual (`[privacy] secret_scan = "warn"`).
    Warned,
}

/// A secret found in a field about to be sealed: which event and field, by which rule, and
/// what was done. It never holds the text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SecretFound {
    /// The session.
    #[serde(skip)]
    pub session: SessionId,
    /// The event's seq.
    pub seq: Seq,
    /// The field.
    pub field: &'static str,
    /// The id of the rule that matched.
    pub rule: String,
    /// What was done.
    pub action: SecretAction,
    /// The redaction's reason, `secret detected: RULE`.
    pub reason: String,
}

/// The reason a field redacted by the scan reads as redacted with.
pub fn secret_reason(rule: &str) -> String {
    format!("secret detected: {rule}")
}

/// Who a redaction the scan made is by, in its records.
pub const SECRET_SCAN_IDENTITY: &str = "sessionlog:secret-scan";

/// The secret scan a deployment's `[privacy]` settings describe.
pub struct SecretScanner {
    mode: SecretScanMode,
    rules: Vec<Rule>,
    /// Every rule's keywords, lowercased, in one automaton matched ASCII-case-insensitively.
    keywords: Option<AhoCorasick>,
    /// The rule each keyword of `keywords` wakes, by the keyword's pattern index.
    keyword_rule: Vec<usize>,
    /// Rules without keywords: run on every text.
    always: Vec<usize>,
}

impl SecretScanner {
    /// The built-in rules in redact mode: what a deployment without a `[privacy]` section gets.
    pub fn defaults() -> Self {
        // The built-in rules compile: a unit test proves it; a failure here is a bug in them.
        Self::from_settings(&PrivacySettings::default()).expect("the built-in secret rules compile")
    }

    /// The scan `settings` describe: the built-in rules less `secret_rules_disabled`, plus
    /// `secret_rules`. A rule that does not compile, an id given twice, or a disabled id that
    /// names no built-in rule is an error naming the setting.
    pub fn from_settings(settings: &PrivacySettings) -> Result<Self> {
        let invalid =
            |setting: &'static str, reason: String| Error::SecretRules { setting, reason };
        for id in &settings.secret_rules_disabled {
            if !built_in_rule_ids().any(|built_in| built_in == id) {
                return Err(invalid(
                    "secret_rules_disabled",
                    format!(
                        "{id:?} is not a built-in rule (one of {})",
                        built_in_rule_ids().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        }
        let compile = |setting, id: &str, pattern: &str| {
            RegexBuilder::new(pattern)
                .size_limit(RULE_SIZE_LIMIT)
                .build()
                .map_err(|e| invalid(setting, format!("rule {id:?}: {e}")))
        };
        let mut rules = Vec::new();
        let mut keywords: Vec<(String, usize)> = Vec::new();
        let enabled = BUILT_IN.iter().filter(|rule| {
            !settings
                .secret_rules_disabled
                .iter()
                .any(|id| id == rule.id)
        });
        for built_in in enabled {
            let index = rules.len();
            rules.push(Rule {
                id: built_in.id.to_string(),
                regex: compile("secret_rules", built_in.id, built_in.regex)?,
                entropy: built_in.entropy,
                allow: built_in
                    .allow
                    .map(|allow| compile("secret_rules", built_in.id, allow))
                    .transpose()?,
            });
            keywords.extend(built_in.keywords.iter().map(|k| (k.to_string(), index)));
        }
        for own in &settings.secret_rules {
            if own.id.trim().is_empty() || rules.iter().any(|rule| rule.id == own.id) {
                return Err(invalid(
                    "secret_rules",
                    format!("rule id {:?} is empty or given twice", own.id),
                ));
            }
            let index = rules.len();
            rules.push(Rule {
                id: own.id.clone(),
                regex: compile("secret_rules", &own.id, &own.regex)?,
                entropy: None,
                allow: None,
            });
            keywords.extend(
                own.keywords
                    .iter()
                    .filter(|k| !k.is_empty())
                    .map(|k| (k.to_lowercase(), index)),
            );
        }
        let always = (0..rules.len())
            .filter(|index| !keywords.iter().any(|(_, rule)| rule == index))
            .collect();
        let automaton = if keywords.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .ascii_case_insensitive(true)
                    .build(keywords.iter().map(|(k, _)| k))
                    .map_err(|e| invalid("secret_rules", format!("keywords: {e}")))?,
            )
        };
        Ok(Self {
            mode: settings.secret_scan,
            rules,
            keywords: automaton,
            keyword_rule: keywords.into_iter().map(|(_, rule)| rule).collect(),
            always,
        })
    }

    /// What is done about a secret found.
    pub fn mode(&self) -> SecretScanMode {
        self.mode
    }

    /// The id of the first rule (in rule order) by which `text` holds a secret, if any.
    pub fn first_match(&self, text: &str) -> Option<&str> {
        let mut woken = vec![false; self.rules.len()];
        for index in &self.always {
            woken[*index] = true;
        }
        if let Some(automaton) = &self.keywords {
            for found in automaton.find_overlapping_iter(text) {
                woken[self.keyword_rule[found.pattern().as_usize()]] = true;
            }
        }
        self.rules
            .iter()
            .zip(woken)
            .find(|(rule, woken)| *woken && rule.finds(text))
            .map(|(rule, _)| rule.id.as_str())
    }

    /// The secrets in the plain text fields of `envelopes`, one finding per field (its first
    /// rule); none when the scan is off. Sealed fields are not looked at (they were scanned
    /// when sealed).
    pub fn scan(&self, envelopes: &mut [EventEnvelope]) -> Vec<SecretFound> {
        let action = match self.mode {
            SecretScanMode::Off => return Vec::new(),
            SecretScanMode::Redact => SecretAction::Redacted,
            SecretScanMode::Warn => SecretAction::Warned,
        };
        let mut found = Vec::new();
        for envelope in envelopes.iter_mut() {
            let (session, seq) = (envelope.session_id, envelope.seq);
            sensitive_fields(&mut envelope.event, |field, content| {
                if let Content::Plain(text) = content
                    && let Some(rule) = self.first_match(text)
                {
                    found.push(SecretFound {
                        session,
                        seq,
                        field,
                        rule: rule.to_string(),
                        action,
                        reason: secret_reason(rule),
                    });
                }
            });
        }
        found
    }
}

/// Removes the sealed text of every field `found` names in `envelopes` (sealed already): what
/// is written is the field's place and key id, with nothing to open. The scan's reason is
/// recorded with the session's key once the event is in the log ([`crate::Keyring::redact`],
/// destroying no key: nothing sealed under it was written); until then, and for a reader whose
/// key predates that, the field reads as unreadable, never as its text.
pub fn withhold(envelopes: &mut [EventEnvelope], found: &[SecretFound]) {
    for envelope in envelopes.iter_mut() {
        let seq = envelope.seq;
        let session = envelope.session_id;
        sensitive_fields(&mut envelope.event, |field, content| {
            let named = found
                .iter()
                .any(|f| f.session == session && f.seq == seq && f.field == field);
            if !named {
                return;
            }
            match content {
                Content::Sealed { ciphertext, .. } => ciphertext.clear(),
                Content::Plain(text) => text.clear(),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionlog_log::SecretRuleSettings;
    use sessionlog_schemas::{CallOutcome, ResultSource, SessionEvent};

    /// An AWS access key id of the real shape (not the documentation's `...EXAMPLE`).
    const AWS_KEY: &str = "AKIAZ3MQTLW7RD4XBN2V";

    fn pem() -> String {
        format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n{}\n-----END PRIVATE KEY-----",
            "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
            "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu"
        )
    }

    /// An OpenAI project key's shape: 74 characters either side of its marker.
    fn openai_key() -> String {
        let half: String = "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z".repeat(3)[..74].to_string();
        format!("OPENAI_API_KEY=sk-proj-{half}T3BlbkFJ{half}")
    }

    fn scanner(settings: PrivacySettings) -> SecretScanner {
        SecretScanner::from_settings(&settings).unwrap()
    }

    #[test]
    fn every_built_in_rule_compiles_and_the_defaults_redact() {
        let scanner = SecretScanner::defaults();
        assert_eq!(scanner.rules.len(), BUILT_IN.len());
        assert_eq!(scanner.mode(), SecretScanMode::Redact);
    }

    /// Word boundaries are ASCII ones, as gitleaks' (Go's `\b`) are: a key written right after
    /// a non-ASCII letter is still a key (and the regex crate's fast engine keeps working on
    /// non-ASCII text instead of falling back to the slow one).
    #[test]
    fn a_key_next_to_non_ascii_text_is_found() {
        let scanner = SecretScanner::defaults();
        assert_eq!(
            scanner.first_match("密钥AKIAZ3MQTLW7RD4XBN2V"),
            Some("aws-access-token")
        );
        assert_eq!(
            scanner.first_match("clé:AKIAZ3MQTLW7RD4XBN2Vé"),
            Some("aws-access-token")
        );
    }

    #[test]
    fn the_common_credential_shapes_are_found_by_their_rules() {
        let scanner = SecretScanner::defaults();
        let jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";
        let gcp_service_account = format!(
            r#"{{"type": "service_account", "private_key_id": "1f2e", "private_key": "{}"}}"#,
            pem().replace('\n', "\\n")
        );
        for (text, rule) in [
            (
                format!("export AWS_ACCESS_KEY_ID={AWS_KEY}"),
                "aws-access-token",
            ),
            (
                "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYzK9q4T2vLm".into(),
                "aws-secret-access-key",
            ),
            (format!("key file:\n{}\n", pem()), "private-key"),
            (gcp_service_account, "private-key"),
            (format!("token: {jwt}"), "jwt"),
            (
                "curl -H 'Authorization: Bearer 8f2c1e9a7b6d5c4f3e2a1b0c9d8e7f6a' https://api"
                    .into(),
                "bearer-token",
            ),
            (
                "DATABASE_URL=postgres://app:s3cr3t-Pw9@db.internal:5432/app".into(),
                "connection-string-password",
            ),
            (
                "ghp_R7xqLk2M9vTn4Wp8Ys1Hd6Fj3Bc5Gz0Ea2Qu".into(),
                "github-pat",
            ),
            (
                "SLACK_BOT_TOKEN=xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx".into(),
                "slack-bot-token",
            ),
            (openai_key(), "openai-api-key"),
        ] {
            assert_eq!(scanner.first_match(&text), Some(rule), "{text}");
        }
    }

    #[test]
    fn examples_placeholders_and_ordinary_text_are_not_secrets() {
        let scanner = SecretScanner::defaults();
        for text in [
            "the tests passed: 14 of 14",
            // AWS's documentation key, and a key of no entropy.
            "AKIAIOSFODNN7EXAMPLE",
            "AKIAAAAAAAAAAAAAAAAA",
            "postgres://app:${DB_PASSWORD}@db.internal/app",
            "postgres://app:****@db.internal/app",
            "see https://example.com/docs and ssh://git@github.com/org/repo",
            "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----",
            "",
        ] {
            assert_eq!(scanner.first_match(text), None, "{text}");
        }
    }

    #[test]
    fn a_deployment_adds_its_own_rules_and_disables_built_in_ones() {
        let scanner = scanner(PrivacySettings {
            secret_scan: SecretScanMode::Warn,
            secret_rules: vec![SecretRuleSettings {
                id: "acme-token".into(),
                regex: r"acme_[a-z0-9]{16}".into(),
                keywords: vec!["ACME_".into()],
            }],
            secret_rules_disabled: vec!["jwt".into()],
            ..PrivacySettings::default()
        });
        assert_eq!(
            scanner.first_match("use acme_0123456789abcdef now"),
            Some("acme-token")
        );
        assert_eq!(scanner.first_match("ACME_ without a token"), None);
        let jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";
        assert_eq!(scanner.first_match(jwt), None, "disabled");
        assert_eq!(scanner.first_match(AWS_KEY), Some("aws-access-token"));
        // A rule without keywords runs on every text.
        let always = scanner_with_rule("internal-host", r"corp-[0-9]{6}", vec![]);
        assert_eq!(always.first_match("on corp-123456"), Some("internal-host"));
    }

    fn scanner_with_rule(id: &str, regex: &str, keywords: Vec<String>) -> SecretScanner {
        scanner(PrivacySettings {
            secret_rules: vec![SecretRuleSettings {
                id: id.into(),
                regex: regex.into(),
                keywords,
            }],
            ..PrivacySettings::default()
        })
    }

    #[test]
    fn a_rule_that_does_not_compile_or_a_disabled_id_that_names_no_rule_is_refused() {
        let error = |settings: PrivacySettings| match SecretScanner::from_settings(&settings) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted"),
        };
        let bad_regex = error(PrivacySettings {
            secret_rules: vec![SecretRuleSettings {
                id: "broken".into(),
                regex: "(unclosed".into(),
                keywords: vec![],
            }],
            ..PrivacySettings::default()
        });
        assert!(
            bad_regex.contains("secret_rules") && bad_regex.contains("broken"),
            "{bad_regex}"
        );
        let unknown = error(PrivacySettings {
            secret_rules_disabled: vec!["no-such-rule".into()],
            ..PrivacySettings::default()
        });
        assert!(unknown.contains("secret_rules_disabled"), "{unknown}");
        let twice = error(PrivacySettings {
            secret_rules: vec![SecretRuleSettings {
                id: "jwt".into(),
                regex: "x".into(),
                keywords: vec![],
            }],
            ..PrivacySettings::default()
        });
        assert!(twice.contains("twice"), "{twice}");
        // Backreferences and look-around would not run in linear time: the crate refuses them.
        let backtracking = error(PrivacySettings {
            secret_rules: vec![SecretRuleSettings {
                id: "lookahead".into(),
                regex: "(?=secret)".into(),
                keywords: vec![],
            }],
            ..PrivacySettings::default()
        });
        assert!(backtracking.contains("lookahead"), "{backtracking}");
    }

    fn result(session: SessionId, seq: Seq, output: &str) -> EventEnvelope {
        let mut envelope = EventEnvelope::new(
            session,
            seq,
            1,
            SessionEvent::ToolCallResult {
                call_seq: seq - 1,
                outcome: CallOutcome::Succeeded,
                output: Content::plain(output),
                source: ResultSource::Executed,
                recorded_by: None,
                note: Some(Content::plain("exit 0")),
            },
        );
        envelope.seq = seq;
        envelope
    }

    #[test]
    fn a_scan_names_the_event_field_and_rule_and_withholding_removes_only_that_field() {
        let session = SessionId::new();
        let mut events = vec![
            result(session, 3, "all clear"),
            result(session, 5, &format!("found {AWS_KEY} in ~/.aws")),
        ];
        let found = SecretScanner::defaults().scan(&mut events);
        assert_eq!(
            found,
            vec![SecretFound {
                session,
                seq: 5,
                field: "output",
                rule: "aws-access-token".into(),
                action: SecretAction::Redacted,
                reason: "secret detected: aws-access-token".into(),
            }]
        );
        withhold(&mut events, &found);
        let SessionEvent::ToolCallResult { output, note, .. } = &events[1].event else {
            panic!("a result");
        };
        assert_eq!(output, &Content::plain(""));
        assert_eq!(note.as_ref(), Some(&Content::plain("exit 0")));
        let SessionEvent::ToolCallResult { output, .. } = &events[0].event else {
            panic!("a result");
        };
        assert_eq!(output, &Content::plain("all clear"));

        let off = scanner(PrivacySettings {
            secret_scan: SecretScanMode::Off,
            ..PrivacySettings::default()
        });
        assert!(off.scan(&mut [result(session, 7, AWS_KEY)]).is_empty());
        let warn = scanner(PrivacySettings {
            secret_scan: SecretScanMode::Warn,
            ..PrivacySettings::default()
        });
        assert_eq!(
            warn.scan(&mut [result(session, 7, &pem())])[0].action,
            SecretAction::Warned
        );
    }

    #[test]
    fn a_long_text_is_scanned_in_one_pass_per_woken_rule() {
        // Linear time: many keywords that wake rules whose expressions then fail, in a long
        // text, end (the regex crate never backtracks; a backtracking engine on the private
        // key's lazy repetition would take quadratic time here).
        let text = "-----BEGIN RSA PRIVATE ghp_ eyJ AKIA bearer :// ".repeat(20_000);
        assert_eq!(SecretScanner::defaults().first_match(&text), None);
    }
}
