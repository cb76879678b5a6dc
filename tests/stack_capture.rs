//! Call stacks in the log are right and their ids stable (issue 20): the same
//! call path gives the same stack id every time and on every thread, and a
//! different path a different id, also when the paths differ only in frames
//! far from the allocation and run at the same stack depth (what the
//! per-thread stack cache must tell apart, see `allocator/src/log/stacks/
//! cache.rs`), and through a function that realigns its frame for an
//! over-aligned local (whose frame size depends on where it is entered).
//! The analyzer symbolizes each stack from the binary, and the names must
//! be the real callers, as many times as the recursion put them there.

mod common;

use std::collections::{HashMap, HashSet};
use std::hint::black_box;

use heaptag_analyzer::Model;
use heaptag_format::Record;

#[global_allocator]
static GLOBAL: heaptag::Alloc = heaptag::Alloc::new();

/// Tracked exactly (above the 64 KiB threshold).
const SIZE: usize = 256 << 10;

#[inline(never)]
fn alloc_site() -> Vec<u8> {
    black_box(Vec::with_capacity(SIZE))
}

#[inline(never)]
fn caller_one(out: &mut Vec<Vec<u8>>) {
    out.push(black_box(alloc_site()));
}

#[inline(never)]
fn caller_two(out: &mut Vec<Vec<u8>>) {
    out.push(black_box(alloc_site()));
}

#[repr(align(128))]
struct Aligned([u8; 256]);

impl Aligned {
    fn touch(&self) -> u8 {
        self.0[7]
    }
}

/// Realigns its frame (a 128-byte aligned local): its frame size depends
/// on the stack pointer it is entered with.
#[inline(never)]
fn realigned(out: &mut Vec<Vec<u8>>) {
    let pad = Aligned([1; 256]);
    black_box(pad.touch());
    black_box(&pad);
    out.push(black_box(alloc_site()));
}

/// Callers of `realigned` whose frames differ in size by 16 bytes: they
/// enter it at different alignments, so its realigned frame (and everything
/// inside it) can sit at the same place under different callers.
macro_rules! via {
    ($($name:ident $n:literal),*) => {
        $(
            #[inline(never)]
            fn $name(out: &mut Vec<Vec<u8>>) {
                let mut local = [0u8; $n];
                black_box(&mut local);
                realigned(out);
                black_box(&local);
            }
        )*
        const VIAS: &[(&str, fn(&mut Vec<Vec<u8>>))] = &[$((stringify!($name), $name)),*];
    };
}
via!(via_16 16, via_32 32, via_48 48, via_64 64, via_80 80, via_96 96, via_112 112, via_128 128);

/// `k` frames of `recurse`, then the `v`th of [`VIAS`].
#[inline(never)]
fn recurse(k: u32, v: usize, out: &mut Vec<Vec<u8>>) {
    let mut local = [0u8; 40];
    local[k as usize] = 1;
    black_box(&mut local);
    if k > 1 {
        recurse(k - 1, v, out);
    } else {
        VIAS[v].1(out);
    }
    black_box(&local);
}

/// Function names of a stack, innermost first, inlined frames included, as
/// the analyzer resolves them.
fn names(m: &Model, id: u32) -> Vec<String> {
    let mut out = Vec::new();
    for f in m.stacks.get(&id).unwrap_or_else(|| panic!("stack {id} defined")) {
        if let Some(inl) = m.inlined.get(f) {
            out.extend(inl.iter().map(|s| s.function.clone()));
        }
        if let Some(s) = m.symbols.get(f) {
            out.push(s.function.clone());
        }
    }
    out
}

fn count(names: &[String], f: &str) -> usize {
    names.iter().filter(|n| n.ends_with(&format!("::{f}"))).count()
}

#[test]
fn stack_ids_are_stable_and_stacks_name_their_callers() {
    let path = common::temp_log("stack_capture");
    heaptag::LogConfig::new(&path).start().expect("log starts");

    let mut one = Vec::new();
    let mut two = Vec::new();
    for _ in 0..20 {
        // Alternating: the same stack pointer in `alloc_site`, different
        // callers.
        caller_one(&mut one);
        caller_two(&mut two);
    }
    let mut threaded: Vec<Vec<Vec<u8>>> = Vec::new();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut v = Vec::new();
                    for _ in 0..10 {
                        caller_one(&mut v);
                    }
                    v
                })
            })
            .collect();
        threaded = hs.into_iter().map(|h| h.join().unwrap()).collect();
    });
    // Recursion depth 1..=4 and every caller of `realigned`, interleaved,
    // three times.
    let mut deep: Vec<(u32, usize, Vec<Vec<u8>>)> = Vec::new();
    for _ in 0..3 {
        for v in 0..VIAS.len() {
            for k in 1..=4 {
                let mut out = Vec::new();
                recurse(k, v, &mut out);
                deep.push((k, v, out));
            }
        }
    }
    let addrs = |v: &[Vec<u8>]| v.iter().map(|b| b.as_ptr() as u64).collect::<Vec<u64>>();
    let (one_a, two_a) = (addrs(&one), addrs(&two));
    let thread_a: Vec<Vec<u64>> = threaded.iter().map(|v| addrs(v)).collect();
    let deep_a: Vec<(u32, usize, u64)> = deep
        .iter()
        .map(|(k, v, out)| (*k, *v, out[0].as_ptr() as u64))
        .collect();
    let health = heaptag::snapshot().health;
    heaptag::finish().expect("a log was running");
    drop((one, two, threaded, deep));
    assert_eq!(health.stacks_not_stored, 0);

    let (recs, _) = common::read_all(&path);
    let mut stack_of: HashMap<u64, u32> = HashMap::new();
    for r in &recs {
        if let Record::Alloc { addr, stack, size, .. } = r {
            if *size == SIZE as u64 {
                stack_of.insert(*addr, *stack);
            }
        }
    }
    let ids = |a: &[u64]| -> HashSet<u32> { a.iter().map(|x| stack_of[x]).collect() };
    let mut m = Model::load(&path, false, false).expect("the log loads");
    heaptag_analyzer::symbolize::symbolize(&mut m);
    // A stack begins inside heaptag: an allocation that crosses a sample
    // point enters `record` through `alloc_slow`, one that does not goes
    // straight there, so one call path of the program has up to two ids
    // (two real stacks), each always the same; the frames from
    // `__rust_alloc` out are the program's, and those must be one list.
    let user = |id: u32| -> Vec<String> {
        let n = names(&m, id);
        let from = n.iter().position(|f| f.ends_with("__rust_alloc")).unwrap_or(0);
        n[from..].to_vec()
    };
    let one_path = |s: &HashSet<u32>, what: &str| {
        assert!(!s.is_empty() && s.len() <= 2 && !s.contains(&0), "{what}: {s:?}");
        let users: HashSet<Vec<String>> = s.iter().map(|&id| user(id)).collect();
        assert_eq!(
            users.len(),
            1,
            "{what}: one call path, one list of the program's frames: {users:#?}"
        );
    };
    let (ones, twos) = (ids(&one_a), ids(&two_a));
    one_path(&ones, "caller_one");
    one_path(&twos, "caller_two");
    assert!(ones.is_disjoint(&twos), "{ones:?} {twos:?}");
    let (id1, id2) = (*ones.iter().next().unwrap(), *twos.iter().next().unwrap());
    // Each thread: the same call path (the threads' paths are the same code,
    // so the same frames: the same ids on both).
    let per_thread: Vec<HashSet<u32>> = thread_a.iter().map(|a| ids(a)).collect();
    for s in &per_thread {
        one_path(s, "thread");
    }
    assert_eq!(
        user(*per_thread[0].iter().next().unwrap()),
        user(*per_thread[1].iter().next().unwrap())
    );

    let n1 = names(&m, id1);
    let n2 = names(&m, id2);
    for (n, mine, other) in [(&n1, "caller_one", "caller_two"), (&n2, "caller_two", "caller_one")] {
        assert_eq!(count(n, "alloc_site"), 1, "{n:#?}");
        assert_eq!(count(n, mine), 1, "{n:#?}");
        assert_eq!(count(n, other), 0, "{n:#?}");
        assert_eq!(
            count(n, "stack_ids_are_stable_and_stacks_name_their_callers"),
            1,
            "{n:#?}"
        );
    }
    let nt = names(&m, *per_thread[0].iter().next().unwrap());
    assert_eq!(count(&nt, "caller_one"), 1, "{nt:#?}");
    assert_eq!(
        count(&nt, "stack_ids_are_stable_and_stacks_name_their_callers"),
        0,
        "{nt:#?}"
    );

    // Every recursive allocation: `recurse` exactly k times, then its own
    // caller of `realigned` and no other; one id per path.
    let mut by_path: HashMap<(u32, usize), HashSet<u32>> = HashMap::new();
    for &(k, v, a) in &deep_a {
        let id = stack_of[&a];
        let n = names(&m, id);
        assert_eq!(count(&n, "realigned"), 1, "depth {k}: {n:#?}");
        assert_eq!(count(&n, "recurse"), k as usize, "depth {k}: {n:#?}");
        for (i, (via, _)) in VIAS.iter().enumerate() {
            assert_eq!(count(&n, via), usize::from(i == v), "depth {k}, {}: {n:#?}", VIAS[v].0);
        }
        assert_eq!(
            count(&n, "stack_ids_are_stable_and_stacks_name_their_callers"),
            1,
            "{n:#?}"
        );
        by_path.entry((k, v)).or_default().insert(id);
    }
    for (path, s) in &by_path {
        one_path(s, &format!("{path:?}"));
    }
    let distinct: HashSet<Vec<String>> = by_path.values().map(|s| user(*s.iter().next().unwrap())).collect();
    assert_eq!(distinct.len(), by_path.len(), "a list of frames per path");
    let all: Vec<u32> = by_path.values().flatten().copied().collect();
    assert_eq!(
        all.len(),
        all.iter().collect::<HashSet<_>>().len(),
        "no id shared by two paths"
    );
    let _ = std::fs::remove_file(&path);
}
