//! `heaptag completions SHELL`: scripts that the shells parse, and (bash)
//! that complete the real commands, subcommands and option values.

mod common;

use std::process::Command;

fn script(shell: &str) -> String {
    let (code, out, err) = common::heaptag(&["completions", shell], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.is_empty());
    out
}

/// Runs `shell -n` (parse only) on `text` when the shell is installed;
/// returns whether it was.
fn parses(shell: &str, text: &str) -> bool {
    let path = common::temp(&format!("completion-{shell}")).with_extension(shell);
    std::fs::write(&path, text).unwrap();
    match Command::new(shell).arg("-n").arg(&path).output() {
        Ok(out) => {
            assert!(
                out.status.success(),
                "{shell} -n: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            true
        }
        Err(_) => false,
    }
}

/// What bash's completion offers for `words` (the last one being completed).
fn complete(words: &[&str]) -> Vec<String> {
    let path = common::temp("completion-run").with_extension("bash");
    std::fs::write(&path, script("bash")).unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let prog = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; _heaptag heaptag '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        path.display(),
        quoted.join(" "),
        words.len() - 1,
        words[words.len() - 1],
        words[words.len() - 2],
    );
    let out = Command::new("bash").arg("-c").arg(prog).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completion_parses_and_completes() {
    assert!(parses("bash", &script("bash")), "bash is needed for this test");
    assert_eq!(complete(&["heaptag", "exp"]), ["export"]);
    let sub = complete(&["heaptag", "export", ""]);
    assert!(
        sub.contains(&"folded".to_string()) && sub.contains(&"perfetto".to_string()),
        "{sub:?}"
    );
    assert_eq!(
        complete(&["heaptag", "report", "--sort", ""]),
        ["peak", "live", "allocated", "name"]
    );
    assert_eq!(
        complete(&["heaptag", "report", "--by", ""]),
        ["stage", "partition", "job", "tag"]
    );
    let opts = complete(&["heaptag", "diff", "--fa"]);
    assert!(opts.contains(&"--fail-above".to_string()), "{opts:?}");
}

#[test]
fn zsh_and_fish_scripts_are_made() {
    let zsh = script("zsh");
    assert!(zsh.starts_with("#compdef heaptag"), "{}", &zsh[..80.min(zsh.len())]);
    let fish = script("fish");
    assert!(fish.contains("complete -c heaptag"), "{}", &fish[..80.min(fish.len())]);
    for (shell, text) in [("zsh", &zsh), ("fish", &fish)] {
        for word in ["export", "diff", "completions", "folded", "perfetto"] {
            assert!(text.contains(word), "{shell} script lacks {word}");
        }
        // Parsed where the shell is installed (Debian: apt-get install zsh fish).
        if !parses(shell, text) {
            eprintln!("{shell} is not installed: its script is not parsed here");
        }
    }
    let (code, _, err) = common::heaptag(&["completions", "tcsh"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("possible values: bash, elvish, fish, powershell, zsh"),
        "{err}"
    );
}
