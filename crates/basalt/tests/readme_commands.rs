//! The README's command lists and `basalt --help` agree: every command and subcommand the binary
//! offers appears in a README code block as `basalt COMMAND [SUBCOMMAND]`, and every
//! `basalt COMMAND` there is one the binary knows.

mod common;

use std::collections::BTreeSet;

use common::BASALT;

/// The command names in the `Commands:` section of `basalt ARGS --help`.
fn commands(args: &[&str]) -> Vec<String> {
    let mut args = args.to_vec();
    args.push("--help");
    let help = testkit::run_ok(BASALT, &args);
    let Some(section) = help.split("Commands:\n").nth(1) else { return Vec::new() };
    section
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// `basalt X Y` pairs (and `basalt X` alone) in the README's code blocks.
fn readme_invocations() -> BTreeSet<Vec<String>> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).expect("README.md");
    let mut invocations = BTreeSet::new();
    let mut in_code = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if !in_code {
            continue;
        }
        let words: Vec<&str> = line.split(|c: char| c.is_whitespace() || c == ';' || c == '`').collect();
        for (index, word) in words.iter().enumerate() {
            if *word != "basalt" {
                continue;
            }
            let command: Vec<String> = words[index + 1..]
                .iter()
                .take(2)
                .take_while(|word| {
                    word.starts_with(|c: char| c.is_ascii_lowercase())
                        && word.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                })
                .map(|word| word.to_string())
                .collect();
            for length in 1..=command.len() {
                invocations.insert(command[..length].to_vec());
            }
        }
    }
    invocations
}

#[test]
fn every_command_of_basalt_help_is_in_the_readme_and_no_other() {
    let readme = readme_invocations();
    let mut missing = Vec::new();
    let top = commands(&[]);
    assert!(top.len() > 5, "basalt --help lists {top:?}");
    for command in &top {
        if !readme.contains(&vec![command.clone()]) {
            missing.push(format!("basalt {command}"));
        }
        for sub in commands(&[command]) {
            if !readme.contains(&vec![command.clone(), sub.clone()]) {
                missing.push(format!("basalt {command} {sub}"));
            }
        }
    }
    assert!(missing.is_empty(), "README.md's code blocks never show: {missing:?}");
    let unknown: Vec<&Vec<String>> =
        readme.iter().filter(|words| words.len() == 1 && !top.contains(&words[0])).collect();
    assert!(unknown.is_empty(), "README.md shows commands basalt does not have: {unknown:?}");
}
