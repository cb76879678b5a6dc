//! Aligned text and Markdown tables, and the bar charts of timelines.

use std::io::{self, Write};

use super::Format;

/// A table: header and rows. Numbers are right-aligned; the first column
/// and columns whose header starts with `<` (text) are left-aligned.
pub(crate) struct Table {
    head: Vec<String>,
    left: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(head: &[&str]) -> Table {
        Table {
            head: head.iter().map(|s| s.trim_start_matches('<').to_string()).collect(),
            left: head
                .iter()
                .enumerate()
                .map(|(i, s)| i == 0 || s.starts_with('<'))
                .collect(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn write(&self, f: Format, out: &mut dyn Write) -> io::Result<()> {
        if self.rows.is_empty() {
            return writeln!(out, "(none)");
        }
        match f {
            Format::Markdown => {
                writeln!(out, "| {} |", self.head.join(" | "))?;
                let align: Vec<&str> = (0..self.head.len())
                    .map(|i| if i == 0 { "---" } else { "---:" })
                    .collect();
                writeln!(out, "| {} |", align.join(" | "))?;
                for r in &self.rows {
                    let cells: Vec<String> = r.iter().map(|c| c.replace('|', "\\|")).collect();
                    writeln!(out, "| {} |", cells.join(" | "))?;
                }
                Ok(())
            }
            _ => {
                let mut w: Vec<usize> = self.head.iter().map(|h| h.chars().count()).collect();
                for r in &self.rows {
                    for (i, c) in r.iter().enumerate() {
                        w[i] = w[i].max(c.chars().count());
                    }
                }
                let line = |cells: &[String], out: &mut dyn Write| -> io::Result<()> {
                    let mut s = String::new();
                    for (i, c) in cells.iter().enumerate() {
                        let pad = w[i] - c.chars().count();
                        if i > 0 {
                            s.push_str("  ");
                        }
                        if self.left[i] {
                            s.push_str(c);
                            s.push_str(&" ".repeat(pad));
                        } else {
                            s.push_str(&" ".repeat(pad));
                            s.push_str(c);
                        }
                    }
                    writeln!(out, "{}", s.trim_end())
                };
                line(&self.head, out)?;
                for r in &self.rows {
                    line(r, out)?;
                }
                Ok(())
            }
        }
    }
}

pub(crate) const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Resamples `v` to `width` columns: each column is the maximum of the
/// samples it covers, or (fewer samples than columns) the sample under it.
pub(crate) fn columns(v: &[u64], width: usize) -> Vec<u64> {
    if v.is_empty() {
        return Vec::new();
    }
    if v.len() <= width {
        return (0..width).map(|c| v[c * v.len() / width]).collect();
    }
    (0..width)
        .map(|c| {
            let (a, b) = (
                c * v.len() / width,
                ((c + 1) * v.len() / width).max(c * v.len() / width + 1),
            );
            v[a..b.min(v.len())].iter().copied().max().unwrap_or(0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_keep_maxima() {
        assert_eq!(columns(&[1, 5, 2, 2, 9, 0], 3), vec![5, 2, 9]);
        assert_eq!(columns(&[1, 2], 4), vec![1, 1, 2, 2]);
    }
}
