//! Every index kind against a `BTreeMap` model, through the `PageIndex` trait.

use super::{LockedIndex, PageIndex, RadixIndex, ShardedIndex};

use crate::frame::FrameId;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn kinds() -> Vec<(&'static str, Box<dyn PageIndex>)> {
    vec![
        ("radix", Box::<RadixIndex>::default()),
        ("locked", Box::<LockedIndex>::default()),
        ("sharded", Box::<ShardedIndex>::default()),
    ]
}

// The set-associative kind places pages itself (an entry's frame must be in the page's set),
// so it has its own model test in `setassoc.rs` instead of this free-form one.

#[derive(Debug, Clone)]
enum Op {
    Insert(u64, FrameId),
    Remove(u64, FrameId),
    Get(u64),
    From(u64),
}

fn op() -> impl Strategy<Value = Op> {
    // Few distinct pages and frames so that collisions, removes of present entries and
    // wrong-frame removes are common; some huge pages so radix roots expand to full height.
    let page = prop_oneof![4 => 0u64..300, 1 => any::<u64>(), 1 => (0u32..64).prop_map(|b| 1u64 << b)];
    prop_oneof![
        3 => (page.clone(), 0u32..8).prop_map(|(p, f)| Op::Insert(p, f)),
        3 => (page.clone(), 0u32..8).prop_map(|(p, f)| Op::Remove(p, f)),
        2 => page.clone().prop_map(Op::Get),
        1 => page.prop_map(Op::From),
    ]
}

proptest! {
    #[test]
    fn every_kind_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..300)) {
        for (name, ix) in kinds() {
            let mut model = BTreeMap::new();
            for op in &ops {
                match *op {
                    Op::Insert(p, f) => {
                        let want = match model.get(&p) {
                            Some(&e) => Err(e),
                            None => { model.insert(p, f); Ok(()) }
                        };
                        prop_assert_eq!(ix.insert_if_absent(p, f), want, "{}", name);
                    }
                    Op::Remove(p, f) => {
                        let want = model.get(&p) == Some(&f);
                        if want { model.remove(&p); }
                        prop_assert_eq!(ix.remove_if(p, f), want, "{}", name);
                    }
                    Op::Get(p) => prop_assert_eq!(ix.get(p), model.get(&p).copied(), "{}", name),
                    Op::From(p) => {
                        let mut got = ix.entries_from(p);
                        got.sort();
                        let want: Vec<_> = model.range(p..).map(|(&k, &v)| (k, v)).collect();
                        prop_assert_eq!(got, want, "{}", name);
                    }
                }
            }
            prop_assert_eq!(ix.len(), model.len(), "{}", name);
        }
    }
}

#[test]
fn ready_entries_read_optimistically_until_removed() {
    for (name, ix) in kinds() {
        ix.insert_if_absent(5, 9).unwrap();
        let mut seen = None;
        let supported = name != "sharded";
        // Not ready yet: a lock-free reader must not use a frame still being filled.
        assert!(!ix.read_optimistic(5, &mut |f| seen = Some(f)), "{name}");
        assert_eq!(seen, None);
        ix.mark_ready(5, 9);
        assert_eq!(ix.read_optimistic(5, &mut |f| seen = Some(f)), supported, "{name}");
        assert_eq!(seen, supported.then_some(9), "{name}");
        // Removed while the reader copies: the copy must be reported invalid.
        let ok = ix.read_optimistic(5, &mut |f| assert!(ix.remove_if(5, f)));
        assert!(!ok, "{name}");
        assert_eq!(ix.get(5), if supported { None } else { Some(9) }, "{name}");
        // A new entry for the page starts not ready again.
        ix.remove_if(5, 9);
        ix.insert_if_absent(5, 10).unwrap();
        assert!(!ix.read_optimistic(5, &mut |_| {}), "{name}");
    }
}
