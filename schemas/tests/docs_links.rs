//! Every relative link in the user-facing Markdown resolves: README.md, clients/python/README.md
//! and docs/**/*.md. A link's file must exist, and a `#anchor` must be one a heading of the
//! target file produces under GitHub's rules (issue 38). External links (a scheme such as
//! `https:`) are not fetched.
//!
//! It reads files only: no servers. It lives in this crate because the schemas crate is the
//! bottom of the dependency graph, so this test builds without the rest of the workspace; it
//! uses nothing but std.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The Markdown files whose links are checked, relative to the repository's root.
fn checked_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![
        root.join("README.md"),
        root.join("clients/python/README.md"),
    ];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        let entries = fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate is in the workspace");
    let mut anchors: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in checked_files(root) {
        let text = fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let shown = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for link in links(&text) {
            checked += 1;
            if let Err(why) = check(root, &file, &link.target, &mut anchors) {
                broken.push(format!("{shown}:{}: ({}) {why}", link.line, link.target));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser blind?"
    );
    assert!(
        broken.is_empty(),
        "{} broken link(s) of {checked}:\n  {}",
        broken.len(),
        broken.join("\n  ")
    );
}

/// Whether `target`, written in `from`, resolves; why not otherwise.
fn check(
    root: &Path,
    from: &Path,
    target: &str,
    anchors: &mut HashMap<PathBuf, BTreeSet<String>>,
) -> Result<(), String> {
    if is_external(target) {
        return Ok(());
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let path = percent_decode(path.split_once('?').map_or(path, |(p, _)| p));
    let file = if path.is_empty() {
        from.to_path_buf()
    } else if let Some(from_root) = path.strip_prefix('/') {
        normalize(&root.join(from_root))
    } else {
        normalize(&from.parent().expect("a file has a directory").join(&path))
    };
    if !file.starts_with(root) {
        return Err("leaves the repository".into());
    }
    if !file.exists() {
        return Err(format!(
            "no such file: {}",
            file.strip_prefix(root).unwrap_or(&file).display()
        ));
    }
    let Some(anchor) = anchor else { return Ok(()) };
    let anchor = percent_decode(anchor);
    if file.extension().is_none_or(|e| e != "md") {
        // GitHub's line anchors on source files: #L10, #L10-L20.
        let line = anchor.strip_prefix('L').unwrap_or("x");
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let ok = match line.split_once("-L") {
            Some((a, b)) => digits(a) && digits(b),
            None => digits(line),
        };
        return if ok {
            Ok(())
        } else {
            Err(format!("#{anchor} on a file that is not Markdown"))
        };
    }
    let known = anchors.entry(file.clone()).or_insert_with(|| {
        let text = fs::read_to_string(&file).unwrap_or_default();
        heading_anchors(&text).into_iter().collect()
    });
    if known.contains(anchor.as_str()) {
        Ok(())
    } else {
        Err(format!(
            "no heading makes #{anchor} in {}",
            file.strip_prefix(root).unwrap_or(&file).display()
        ))
    }
}

/// A link with a scheme (`https:`, `mailto:`) is external.
fn is_external(target: &str) -> bool {
    match target.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
                && !scheme.contains('/')
        }
        None => false,
    }
}

/// `a/./b/../c` as `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A link's target and the line it is on (1-based).
#[derive(Debug, PartialEq)]
struct Link {
    line: usize,
    target: String,
}

/// Which lines are inside a fenced code block (the fences included).
fn fenced_lines(text: &str) -> Vec<bool> {
    let mut fence: Option<(u8, usize)> = None;
    text.lines()
        .map(|line| {
            let trimmed = line.trim_start_matches(' ');
            let indent = line.len() - trimmed.len();
            let run = |c: u8| trimmed.bytes().take_while(|&b| b == c).count();
            match fence {
                Some((c, n)) => {
                    if indent < 4 && run(c) >= n && trimmed[run(c)..].trim().is_empty() {
                        fence = None;
                    }
                    true
                }
                None => {
                    for c in [b'`', b'~'] {
                        let n = run(c);
                        if indent < 4 && n >= 3 && !(c == b'`' && trimmed[n..].contains('`')) {
                            fence = Some((c, n));
                            return true;
                        }
                    }
                    false
                }
            }
        })
        .collect()
}

/// The text with fenced code blocks and code spans blanked out (same length, newlines kept),
/// so that what looks like a link inside code is not taken for one.
fn without_code(text: &str) -> String {
    let fenced = fenced_lines(text);
    let mut out: Vec<u8> = Vec::with_capacity(text.len());
    for (line, in_fence) in text
        .split_inclusive('\n')
        .zip(fenced.iter().chain(std::iter::repeat(&false)))
    {
        if *in_fence {
            out.extend(line.bytes().map(|b| if b == b'\n' { b'\n' } else { b' ' }));
        } else {
            out.extend(line.bytes());
        }
    }
    // Code spans, paragraph by paragraph (a span does not cross a blank line): a run of n
    // backticks up to the next run of exactly n; a run with no partner is literal.
    let mut start = 0;
    while start < out.len() {
        let end = find_blank_line(&out, start).unwrap_or(out.len());
        blank_code_spans(&mut out[start..end]);
        start = end + 1;
    }
    String::from_utf8(out).expect("only ASCII bytes were replaced, by spaces")
}

fn find_blank_line(bytes: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while let Some(nl) = bytes[i..].iter().position(|&b| b == b'\n') {
        let next = i + nl + 1;
        let rest = &bytes[next..];
        let line_end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        if rest[..line_end].iter().all(|b| b.is_ascii_whitespace()) {
            return Some(next + line_end);
        }
        i = next;
    }
    None
}

fn blank_code_spans(block: &mut [u8]) {
    let run_at = |b: &[u8], i: usize| b[i..].iter().take_while(|&&c| c == b'`').count();
    let mut i = 0;
    while i < block.len() {
        if block[i] == b'\\' {
            i += 2;
            continue;
        }
        if block[i] != b'`' {
            i += 1;
            continue;
        }
        let n = run_at(block, i);
        let mut j = i + n;
        let mut close = None;
        while j < block.len() {
            if block[j] == b'`' {
                let m = run_at(block, j);
                if m == n {
                    close = Some(j + m);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                for b in &mut block[i..end] {
                    if *b != b'\n' {
                        *b = b' ';
                    }
                }
                i = end;
            }
            None => i += n,
        }
    }
}

/// The targets of inline links and images (`[text](target "title")`, `![alt](<target>)`) and
/// of link reference definitions (`[label]: target`), outside code.
fn links(text: &str) -> Vec<Link> {
    let text = without_code(text);
    let bytes = text.as_bytes();
    let line_of = |at: usize| bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(at) = text[i..].find("](") {
        let open = i + at + 2;
        if let Some(target) = inline_target(&text[open..]) {
            found.push(Link {
                line: line_of(open),
                target,
            });
        }
        i = open;
    }
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if line.len() - trimmed.len() > 3 || !trimmed.starts_with('[') {
            continue;
        }
        if let Some(close) = trimmed.find("]:")
            && !trimmed[1..close].contains(']')
            && let Some(target) = trimmed[close + 2..].split_whitespace().next()
        {
            let target = target.trim_start_matches('<').trim_end_matches('>');
            found.push(Link {
                line: n + 1,
                target: target.to_string(),
            });
        }
    }
    found
}

/// The destination at the start of what follows `](`; None when it is not a link.
fn inline_target(rest: &str) -> Option<String> {
    let rest = rest.trim_start_matches([' ', '\t']);
    if let Some(inner) = rest.strip_prefix('<') {
        let end = inner.find(['>', '\n'])?;
        return (inner.as_bytes()[end] == b'>').then(|| inner[..end].to_string());
    }
    let mut depth = 0usize;
    let mut escaped = false;
    for (k, c) in rest.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '(' => depth += 1,
            ')' if depth == 0 => return Some(rest[..k].to_string()),
            ')' => depth -= 1,
            c if c.is_whitespace() => {
                // A title may follow: `(target "title")`.
                return (depth == 0 && k > 0).then(|| rest[..k].to_string());
            }
            _ => {}
        }
    }
    None
}

/// The anchors a file's headings produce on GitHub, in order.
fn heading_anchors(text: &str) -> Vec<String> {
    let fenced = fenced_lines(text);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let mut anchors = Vec::new();
    for (line, in_fence) in text.lines().zip(fenced) {
        if in_fence {
            continue;
        }
        let Some(heading) = atx_heading(line) else {
            continue;
        };
        let base = slug(&heading);
        // GitHub: the first `x`, then `x-1`, `x-2`, ... skipping any already taken.
        let mut anchor = base.clone();
        let count = seen.entry(base.clone()).or_insert(0);
        while taken.contains(&anchor) {
            *count += 1;
            anchor = format!("{base}-{count}");
        }
        taken.insert(anchor.clone());
        anchors.push(anchor);
    }
    anchors
}

/// The text of an ATX heading (`## Text ##`), if the line is one.
fn atx_heading(line: &str) -> Option<String> {
    let trimmed = line.trim_start_matches(' ');
    if line.len() - trimmed.len() > 3 {
        return None;
    }
    let level = trimmed.bytes().take_while(|&b| b == b'#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &trimmed[level..];
    if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
        return None;
    }
    let mut text = rest.trim();
    // A closing sequence of #s, preceded by a space, is not part of the text.
    let without = text.trim_end_matches('#');
    if without.is_empty() || without.ends_with([' ', '\t']) {
        text = without.trim_end();
    }
    Some(text.to_string())
}

/// GitHub's anchor for a heading: the rendered text (code spans' text, links' text, no markup)
/// lowercased, every character but letters, digits, hyphens, underscores and spaces dropped,
/// and each space a hyphen.
fn slug(heading: &str) -> String {
    rendered(heading)
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A heading's text as GitHub renders it: backticks, emphasis stars, HTML tags and link
/// destinations gone.
fn rendered(heading: &str) -> String {
    let mut out = String::new();
    let mut rest = heading;
    while let Some(c) = rest.chars().next() {
        if c == '`' {
            let n = rest.bytes().take_while(|&b| b == b'`').count();
            let fence = &rest[..n];
            if let Some(end) = rest[n..].find(fence) {
                out.push_str(rest[n..n + end].trim());
                rest = &rest[n + end + n..];
                continue;
            }
            out.push_str(fence);
            rest = &rest[n..];
        } else if rest.starts_with("](")
            && let Some(end) = rest.find(')')
        {
            rest = &rest[end + 1..];
        } else if c == '<'
            && let Some(end) = rest.find('>')
        {
            rest = &rest[end + 1..];
        } else {
            if !matches!(c, '*' | '[' | '\\') {
                out.push(c);
            }
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

#[test]
fn slugs_follow_githubs_rules() {
    assert_eq!(
        slug("8. Liabilities, and what is not built yet"),
        "8-liabilities-and-what-is-not-built-yet"
    );
    assert_eq!(
        slug("i. Operators' acts are the operators' (schema v6)"),
        "i-operators-acts-are-the-operators-schema-v6"
    );
    assert_eq!(slug("The `[retention]` keys"), "the-retention-keys");
    assert_eq!(
        slug("`sessionlog doctor` output"),
        "sessionlog-doctor-output"
    );
    assert_eq!(slug("key_cache_secs: a -- b"), "key_cache_secs-a----b");
    assert_eq!(
        slug("See [the design](design.md#x) *now*"),
        "see-the-design-now"
    );
    assert_eq!(
        slug("Traces: reading them back"),
        "traces-reading-them-back"
    );
}

#[test]
fn duplicate_headings_get_numbers_and_code_is_not_a_heading() {
    let text = "# Dead letters\n\n## Dead letters\n\n```sh\n# Dead letters\n```\n\n## Dead letters ##\n\n#not a heading\n";
    assert_eq!(
        heading_anchors(text),
        ["dead-letters", "dead-letters-1", "dead-letters-2"]
    );
}

#[test]
fn links_outside_code_are_found_with_their_lines() {
    let text = "See [a](a.md#x) and\n[b\nc](<b c.md> \"title\"), `[not](code.md)`.\n\n\
                ```md\n[not](fenced.md)\n```\n![img](images/x.png)\n[ref]: docs/y.md\n\
                `unclosed [yes](yes.md)\n";
    let found = links(text);
    let got: Vec<(usize, &str)> = found.iter().map(|l| (l.line, l.target.as_str())).collect();
    assert_eq!(
        got,
        [
            (1, "a.md#x"),
            (3, "b c.md"),
            (8, "images/x.png"),
            (10, "yes.md"),
            (9, "docs/y.md"),
        ]
    );
}

#[test]
fn external_links_are_not_checked() {
    assert!(is_external("https://example.com/x#y"));
    assert!(is_external("mailto:someone@example.com"));
    assert!(!is_external(
        "docs/design.md#1-the-log-is-the-source-of-truth"
    ));
    assert!(!is_external("#retention"));
}
