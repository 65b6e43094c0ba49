//! The MCP server: five read-only tools and the context view with its left-out references as
//! resources, all over one session's history ([`crate::Reader`]).
//!
//! Which session a request reads is decided before it gets here: over Streamable HTTP the
//! access check ([`crate::http`]) puts a [`Target`] in the request; over stdio the server reads
//! the session it was started for.

use crate::Error;
use crate::reader::{ReadRequest, Reader, SearchRequest, Target};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde::Serialize;
use sessionlog_schemas::SessionId;

/// The URI scheme of this server's resources.
pub const SCHEME: &str = "sessionlog://";

/// The most `older` references listed as resources (a view holds few; this bounds a corrupt one).
const MAX_LISTED: usize = 1000;

/// The MCP server of one session's history.
#[derive(Clone)]
pub struct HistoryServer {
    reader: Reader,
    /// The session stdio serves (over HTTP the access check's [`Target`] decides).
    default: Option<Target>,
    tool_router: ToolRouter<HistoryServer>,
}

/// `history_read`'s arguments.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// The first seq to read (default 1).
    pub from_seq: Option<u64>,
    /// The last seq to read (default: the last there is).
    pub to_seq: Option<u64>,
    /// Only events of these kinds (e.g. ["UserRequest", "ModelResponse"]); default every kind.
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Events per page, 1 to 1000 (default 100).
    pub limit: Option<u64>,
    /// The previous page's next_cursor, to read the next page of the same range.
    pub cursor: Option<String>,
    /// An ancestor of this session (from `lineage`) to read its inherited history, up to the
    /// fork point; default this session.
    pub session_id: Option<String>,
}

/// `history_search`'s arguments.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// The text to find, case-insensitive (1 to 200 characters).
    pub query: String,
    /// Hits per page, 1 to 100 (default 20).
    pub limit: Option<u64>,
    /// Only these kinds (default: the conversation's kinds).
    #[serde(default)]
    pub kinds: Vec<String>,
    /// Time budget in milliseconds, 1 to 10000 (default 1000): the answer comes within it,
    /// with next_cursor when the search did not reach the session's start.
    pub budget_ms: Option<u64>,
    /// The previous page's next_cursor, to search older events.
    pub cursor: Option<String>,
    /// Search a fork's inherited history too (default true).
    pub inherited: Option<bool>,
}

/// `summary_expand`'s arguments.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpandParams {
    /// The seq of the ContextSummarized event (a summary's `turn.seq` in the context view).
    pub seq: u64,
    /// Covered events per page, 1 to 1000 (default 100).
    pub limit: Option<u64>,
    /// The previous page's covered.next_cursor.
    pub cursor: Option<String>,
    /// The ancestor the summary belongs to, for an inherited one; default this session.
    pub session_id: Option<String>,
}

/// `call_lookup`'s arguments.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallParams {
    /// The seq of the tool call's request or of its result.
    pub seq: Option<u64>,
    /// The request's idempotency key (the newest request with it).
    pub idempotency_key: Option<String>,
    /// Time budget in milliseconds for the scans, 1 to 10000 (default 1000).
    pub budget_ms: Option<u64>,
    /// The ancestor the call belongs to, for an inherited one; default this session.
    pub session_id: Option<String>,
}

/// `lineage` takes nothing.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// A tool's answer: the JSON of `value` as text, or the error as a tool error the model reads
/// (bad input, an unknown session) or a protocol error (a server behind this one failed).
fn answer<T: Serialize>(value: crate::Result<T>) -> std::result::Result<CallToolResult, ErrorData> {
    match value {
        Ok(value) => {
            let text = serde_json::to_string(&value)
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
        }
        Err(e) if is_callers(&e) => Ok(CallToolResult::error(vec![ContentBlock::text(
            e.to_string(),
        )])),
        Err(e) => Err(server_error(&e)),
    }
}

/// Whether `e` is about what the caller asked, so the model should see it and may ask again.
fn is_callers(e: &Error) -> bool {
    use sessionlog_recovery::Error as R;
    matches!(
        e,
        Error::Invalid(_)
            | Error::UnknownSession(_)
            | Error::Missing(_)
            | Error::OverBudget(_)
            | Error::Recovery(R::BadRange { .. } | R::NotIndexed(_) | R::UnknownSession(_))
    )
}

fn server_error(e: &Error) -> ErrorData {
    // The cause goes to the log with its detail; the caller learns that a server behind this
    // one failed and may retry.
    tracing::warn!(error = %e, "an MCP request failed");
    ErrorData::internal_error(
        "reading the history failed (a server behind this one did not answer); retry later",
        None,
    )
}

fn resource_error(e: &Error) -> ErrorData {
    if is_callers(e) {
        ErrorData::resource_not_found(e.to_string(), None)
    } else {
        server_error(e)
    }
}

fn session_param(text: Option<&str>) -> crate::Result<Option<SessionId>> {
    text.map(|t| {
        t.parse()
            .map_err(|_| Error::Invalid(format!("session_id must be a session's UUID, not {t:?}")))
    })
    .transpose()
}

#[tool_router]
impl HistoryServer {
    /// A server reading through `reader`; `default` is the session served when the transport
    /// carries no access decision (stdio).
    pub fn new(reader: Reader, default: Option<Target>) -> Self {
        Self {
            reader,
            default,
            tool_router: Self::tool_router(),
        }
    }

    /// Which session this request reads.
    fn target(&self, context: &RequestContext<RoleServer>) -> crate::Result<Target> {
        let decided = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Target>().copied());
        decided
            .or(self.default)
            .ok_or_else(|| Error::Invalid("this server serves no session".into()))
    }

    #[tool(
        description = "Read a range of this session's history by seq (the numbers the context \
                       view's `older` ranges and summaries name), optionally only some kinds, a \
                       page at a time. Each event carries its seq; texts of an erased session \
                       read as erased.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn history_read(
        &self,
        Parameters(p): Parameters<ReadParams>,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        let run = async {
            let target = self.target(&context)?;
            let request = ReadRequest {
                session_id: session_param(p.session_id.as_deref())?,
                from_seq: p.from_seq,
                to_seq: p.to_seq,
                kinds: p.kinds,
                limit: p.limit,
                cursor: p.cursor,
            };
            self.reader.read(target, request).await
        };
        answer(run.await)
    }

    #[tool(
        description = "Search this session's texts (and a fork's inherited history) for a \
                       phrase, case-insensitive, newest first. Answers within its time budget \
                       (default 1 s) with seq, kind and a snippet per hit, and a next_cursor when \
                       it stopped before the session's start.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn history_search(
        &self,
        Parameters(p): Parameters<SearchParams>,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        let run = async {
            let target = self.target(&context)?;
            let request = SearchRequest {
                query: p.query,
                limit: p.limit,
                kinds: p.kinds,
                budget_ms: p.budget_ms,
                cursor: p.cursor,
                inherited: p.inherited,
            };
            self.reader.search(target, request).await
        };
        answer(run.await)
    }

    #[tool(
        description = "Expand a summary: the events a ContextSummarized event (by its seq) \
                       stands for, in full, a page at a time.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn summary_expand(
        &self,
        Parameters(p): Parameters<ExpandParams>,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        let run = async {
            let target = self.target(&context)?;
            let session = session_param(p.session_id.as_deref())?;
            self.reader
                .expand(target, session, p.seq, p.limit, p.cursor)
                .await
        };
        answer(run.await)
    }

    #[tool(
        description = "Look up a tool call: its request and its result, by the seq of either or \
                       by the request's idempotency key.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn call_lookup(
        &self,
        Parameters(p): Parameters<CallParams>,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        let run = async {
            let target = self.target(&context)?;
            let session = session_param(p.session_id.as_deref())?;
            let budget = crate::reader::budget_of(p.budget_ms)?;
            let key = p.idempotency_key.as_deref();
            match self
                .reader
                .call(target, session, p.seq, key, budget)
                .await?
            {
                Some(found) => Ok(found),
                None => Err(Error::Invalid(
                    "no tool call there: no request at that seq, or none with that key".into(),
                )),
            }
        };
        answer(run.await)
    }

    #[tool(
        description = "This session's lineage: the parent it was forked from and where, its \
                       children, and which ancestors' history reads through it (up to each fork \
                       point).",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn lineage(
        &self,
        Parameters(_): Parameters<NoParams>,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResult, ErrorData> {
        let run = async {
            let target = self.target(&context)?;
            self.reader.lineage(target).await
        };
        answer(run.await)
    }
}

/// The URI of the context view of `session`.
pub fn context_uri(session: SessionId) -> String {
    format!("{SCHEME}sessions/{session}/context")
}

/// The URI of one event, or of a range of seqs (`first..=last`).
pub fn events_uri(session: SessionId, first: u64, last: Option<u64>) -> String {
    match last {
        Some(last) if last != first => format!("{SCHEME}sessions/{session}/events/{first}-{last}"),
        _ => format!("{SCHEME}sessions/{session}/events/{first}"),
    }
}

/// What a resource URI names.
#[derive(Debug, PartialEq, Eq)]
enum Named {
    Context(SessionId),
    Events(SessionId, u64, u64),
}

fn parse_uri(uri: &str) -> Option<Named> {
    let rest = uri.strip_prefix(SCHEME)?.strip_prefix("sessions/")?;
    let (session, rest) = rest.split_once('/')?;
    let session: SessionId = session.parse().ok()?;
    if rest == "context" {
        return Some(Named::Context(session));
    }
    let seqs = rest.strip_prefix("events/")?;
    let (first, last) = match seqs.split_once('-') {
        Some((first, last)) => (first.parse().ok()?, last.parse().ok()?),
        None => {
            let seq = seqs.parse().ok()?;
            (seq, seq)
        }
    };
    (first >= 1 && last >= first).then_some(Named::Events(session, first, last))
}

impl HistoryServer {
    async fn resources(&self, target: Target) -> crate::Result<Vec<Resource>> {
        let view = self.reader.context(target).await?;
        let mut listed = vec![
            Resource::new(context_uri(target.session), "context view")
                .with_description(
                    "What the next model call sees of this session; `older` and summaries name \
                     the seq ranges it left out, each readable as a resource below.",
                )
                .with_mime_type("application/json"),
        ];
        let mut refs: Vec<(SessionId, u64, u64, String)> = Vec::new();
        for older in &view.context.older {
            let why = match older.summary_seq {
                Some(seq) => format!("summarised by seq {seq}"),
                None => "left out of the context".to_string(),
            };
            refs.push((target.session, older.first_seq, older.last_seq, why));
        }
        let mut inherited = view.context.inherited.as_deref();
        while let Some(parent) = inherited {
            let Some(context) = parent.context.as_deref() else {
                break;
            };
            for older in &context.older {
                refs.push((
                    parent.parent,
                    older.first_seq,
                    older.last_seq,
                    "inherited, left out of the context".to_string(),
                ));
            }
            inherited = context.inherited.as_deref();
        }
        for (session, first, last, why) in refs.into_iter().take(MAX_LISTED) {
            listed.push(
                Resource::new(
                    events_uri(session, first, Some(last)),
                    format!("seqs {first}..={last}"),
                )
                .with_description(format!("Events {first} to {last} of {session}: {why}."))
                .with_mime_type("application/json"),
            );
        }
        Ok(listed)
    }

    async fn read(&self, target: Target, uri: &str) -> crate::Result<String> {
        let text = match parse_uri(uri) {
            Some(Named::Context(session)) if session == target.session => {
                serde_json::to_string(&self.reader.context(target).await?)
            }
            Some(Named::Events(session, first, last)) => {
                let page = self
                    .reader
                    .read(
                        target,
                        ReadRequest {
                            session_id: Some(session),
                            from_seq: Some(first),
                            to_seq: Some(last),
                            limit: Some(sessionlog_recovery::history::MAX_LIMIT),
                            ..ReadRequest::default()
                        },
                    )
                    .await?;
                serde_json::to_string(&page)
            }
            _ => {
                return Err(Error::Invalid(format!(
                    "no such resource here: {uri:?} (this server serves \
                     {SCHEME}sessions/{}/context and .../events/{{seq}} or {{first}}-{{last}})",
                    target.session
                )));
            }
        };
        text.map_err(|e| Error::Task(e.to_string()))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for HistoryServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new(
            "sessionlog-mcp",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(
            "The durable history of this agent session. The context you were given leaves older \
             turns out; its `older` ranges and summaries name their seqs. Fetch them with \
             history_read (a seq range), summary_expand (a summary's seq), history_search (a \
             phrase), call_lookup (a tool call) and lineage (a fork's parent), or read the \
             resources sessionlog://sessions/{id}/events/{seq}.",
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListResourcesResult, ErrorData> {
        let target = self.target(&context).map_err(|e| resource_error(&e))?;
        let resources = self
            .resources(target)
            .await
            .map_err(|e| resource_error(&e))?;
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(
                format!("{SCHEME}sessions/{{session_id}}/events/{{seq}}"),
                "one event",
            )
            .with_description(
                "One event of this session (or of an ancestor, up to the fork point).",
            )
            .with_mime_type("application/json"),
            ResourceTemplate::new(
                format!("{SCHEME}sessions/{{session_id}}/events/{{first_seq}}-{{last_seq}}"),
                "a range of events",
            )
            .with_description("Events first_seq..=last_seq, at most 1000 of them.")
            .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<ReadResourceResponse, ErrorData> {
        let target = self.target(&context).map_err(|e| resource_error(&e))?;
        let text = self
            .read(target, &request.uri)
            .await
            .map_err(|e| resource_error(&e))?;
        let contents = ResourceContents::text(text, request.uri.clone());
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_uris_round_trip_and_nonsense_is_not_one() {
        let s = SessionId::new();
        assert_eq!(parse_uri(&context_uri(s)), Some(Named::Context(s)));
        assert_eq!(
            parse_uri(&events_uri(s, 7, None)),
            Some(Named::Events(s, 7, 7))
        );
        assert_eq!(
            parse_uri(&events_uri(s, 2, Some(9))),
            Some(Named::Events(s, 2, 9))
        );
        for bad in [
            String::new(),
            format!("{SCHEME}sessions/{s}/events/0"),
            format!("{SCHEME}sessions/{s}/events/9-2"),
            format!("{SCHEME}sessions/{s}/events/-1"),
            format!("{SCHEME}sessions/{s}/events/99999999999999999999999"),
            format!("{SCHEME}sessions/not-a-uuid/context"),
            format!("file:///sessions/{s}/context"),
        ] {
            assert_eq!(parse_uri(&bad), None, "{bad}");
        }
    }
}
