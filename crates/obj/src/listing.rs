//! One key listing merged from several sources: the targets of an engine
//! that a striped object's dkeys spread over, or the groups of an object
//! spread over engines (`dist`). Each source is asked for up to `max` keys
//! strictly after the same anchor (keys list in bytewise order, an anchor
//! resumes after a key); their answers merge in key order.

use crate::types::Anchor;

/// One source's answer to a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// The keys it returned that belong in the listing (bytewise order).
    pub keys: Vec<Vec<u8>>,
    /// The last key it returned when it has more after it (`None`: done).
    pub more_after: Option<Vec<u8>>,
}

impl Page {
    /// A source's answer (`keys`, the anchor it returned): has more when
    /// its anchor is not at the end. A source that says it has more but
    /// returned no key is taken as done (it cannot be resumed past
    /// anything).
    pub fn new(keys: Vec<Vec<u8>>, anchor: &Anchor) -> Page {
        let more_after = if anchor.is_eof() {
            None
        } else {
            keys.last().cloned()
        };
        Page { keys, more_after }
    }
}

/// Merges `pages` (one per source, all asked after `anchor`): the keys in
/// order without duplicates, only up to the smallest key after which a
/// source has more (beyond it that source's keys are not known yet), at
/// most `max`; and the anchor to resume strictly after the last key
/// returned (at the end when every source is done and nothing was cut).
pub fn merge(anchor: &Anchor, pages: Vec<Page>, max: u32) -> (Vec<Vec<u8>>, Anchor) {
    let max = max.max(1) as usize;
    let mut bound: Option<Vec<u8>> = None;
    let mut keys: Vec<Vec<u8>> = Vec::new();
    for p in pages {
        if let Some(last) = p.more_after {
            if bound.as_ref().is_none_or(|b| last < *b) {
                bound = Some(last);
            }
        }
        keys.extend(p.keys);
    }
    keys.sort();
    keys.dedup();
    if let Some(b) = &bound {
        keys.retain(|k| k <= b);
    }
    let mut next = Anchor {
        after: anchor.after.clone(),
        started: true,
        eof: false,
    };
    let last = if keys.len() > max {
        keys.truncate(max);
        keys.last().cloned()
    } else if bound.is_some() {
        bound
    } else {
        next.eof = true;
        keys.last().cloned()
    };
    if let Some(l) = last {
        next.after.clear();
        crate::vos::keys::enc(&mut next.after, &l);
    }
    (keys, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    /// Two sorted sources listed through `merge` in pages of `max`, as a
    /// client resumes: every key once, in order.
    fn list_all(a: &[&str], b: &[&str], max: u32) -> Vec<Vec<u8>> {
        let src: Vec<Vec<Vec<u8>>> = [a, b]
            .iter()
            .map(|s| s.iter().map(|x| k(x)).collect())
            .collect();
        let mut anchor = Anchor::default();
        let mut out = Vec::new();
        let mut rounds = 0;
        while !anchor.is_eof() {
            rounds += 1;
            assert!(rounds < 100, "no progress");
            let pages = src
                .iter()
                .map(|keys| {
                    // a source: up to `max` keys after the anchor's key
                    let after: Vec<&Vec<u8>> = keys
                        .iter()
                        .filter(|x| {
                            let mut e = Vec::new();
                            crate::vos::keys::enc(&mut e, x);
                            !anchor.started || e > anchor.after
                        })
                        .collect();
                    let page: Vec<Vec<u8>> = after
                        .iter()
                        .take(max as usize)
                        .map(|x| x.to_vec())
                        .collect();
                    let more = after.len() > page.len();
                    Page {
                        more_after: if more { page.last().cloned() } else { None },
                        keys: page,
                    }
                })
                .collect();
            let (keys, next) = merge(&anchor, pages, max);
            assert!(keys.len() <= max as usize);
            out.extend(keys);
            anchor = next;
        }
        out
    }

    #[test]
    fn pages_of_two_sources_list_every_key_once_in_order() {
        let a = ["a", "c", "d", "k", "z"];
        let b = ["b", "c", "e", "f", "g", "h", "y"];
        let mut want: Vec<Vec<u8>> = a.iter().chain(b.iter()).map(|x| k(x)).collect();
        want.sort();
        want.dedup();
        for max in 1..10 {
            assert_eq!(list_all(&a, &b, max), want, "max {max}");
        }
        assert_eq!(list_all(&[], &[], 3), Vec::<Vec<u8>>::new());
        assert_eq!(list_all(&["q"], &[], 1), vec![k("q")]);
    }

    #[test]
    fn keys_past_a_source_with_more_wait_for_the_next_page() {
        let pages = vec![
            Page {
                keys: vec![k("a"), k("b")],
                more_after: Some(k("b")),
            },
            Page {
                keys: vec![k("c")],
                more_after: None,
            },
        ];
        let (keys, next) = merge(&Anchor::default(), pages, 10);
        assert_eq!(keys, vec![k("a"), k("b")]);
        assert!(!next.is_eof());
    }
}
