//! Flame graphs (icicles: the tag at the top, the allocating function at
//! the bottom) drawn by `inferno`, the Rust port of FlameGraph, from the
//! folded stacks of [`crate::folded`]. inferno's SVG carries its own script
//! (zoom on click, search, the details line); the page shows each SVG in
//! its own frame, where that script runs as it does in a file of its own.

use serde::Serialize;

/// Narrowest frame drawn, in pixels of inferno's 1200-pixel drawing.
pub const MIN_WIDTH_PX: f64 = 0.5;

/// A flame graph and what it weighs.
#[derive(Clone, Debug, Serialize)]
pub struct Flame {
    /// What it shows, in words.
    pub title: String,
    /// The bytes of all its stacks together.
    pub total_bytes: u64,
    /// Folded stacks drawn.
    pub stacks: usize,
    /// The SVG (with inferno's script), `None` when no stack weighs anything.
    pub svg: Option<String>,
}

/// Draws the folded `lines` (`frame;frame;... bytes`) as an icicle.
pub fn flame(title: &str, lines: &[String]) -> Result<Flame, String> {
    let total_bytes = lines
        .iter()
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, n)| n.parse::<u64>().ok()))
        .fold(0u64, u64::saturating_add);
    if lines.is_empty() || total_bytes == 0 {
        return Ok(Flame {
            title: title.into(),
            total_bytes,
            stacks: 0,
            svg: None,
        });
    }
    // inferno adds weights in a usize: a total past 2^62 (only a damaged
    // or hostile log claims that much) is drawn in units of `scale` bytes.
    let exact: u128 = lines
        .iter()
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, n)| n.parse::<u64>().ok()))
        .map(u128::from)
        .sum();
    let scale = exact.div_ceil(1 << 62).max(1);
    let scaled: Vec<String>;
    let lines: &[String] = if scale > 1 {
        scaled = lines
            .iter()
            .filter_map(|l| {
                let (stack, n) = l.rsplit_once(' ')?;
                let n = u128::from(n.parse::<u64>().ok()?) / scale;
                (n > 0).then(|| format!("{stack} {n}"))
            })
            .collect();
        &scaled
    } else {
        lines
    };
    let mut opt = inferno::flamegraph::Options::default();
    opt.title = title.into();
    opt.count_name = if scale > 1 {
        format!("x {scale} bytes")
    } else {
        "bytes".into()
    };
    opt.name_type = "Frame:".into();
    opt.direction = inferno::flamegraph::Direction::Inverted;
    // Frames narrower than half a pixel of the 1200-pixel drawing are left
    // out (their bytes stay in their parent's width): they could not be
    // seen or clicked, and thousands of them would make the page large.
    opt.min_width = MIN_WIDTH_PX;
    opt.colors = inferno::flamegraph::Palette::Basic(inferno::flamegraph::color::BasicPalette::Mem);
    // Colours from the frame names, not random: the same log draws the
    // same picture.
    opt.hash = true;
    opt.deterministic = true;
    let mut svg = Vec::new();
    // A panic inside the library (a case it does not expect) becomes an
    // error naming the flame graph, not the end of the command.
    let drawn = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        inferno::flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), &mut svg)
    }));
    match drawn {
        Ok(r) => r.map_err(|e| format!("inferno could not draw the flame graph: {e}"))?,
        Err(_) => return Err("inferno failed while drawing the flame graph".into()),
    }
    let svg = String::from_utf8(svg).map_err(|e| format!("inferno wrote invalid UTF-8: {e}"))?;
    // Without the XML prolog and its DOCTYPE (which names a DTD by URL):
    // the page shows the SVG inside an HTML document.
    let svg = svg.find("<svg").map_or(svg.clone(), |i| svg[i..].to_string());
    Ok(Flame {
        title: title.into(),
        total_bytes,
        stacks: lines.len(),
        svg: Some(svg),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_icicle_of_two_stacks() {
        let lines = vec![
            "job=1 stage=a;main;alloc_a 3000".to_string(),
            "job=1 stage=b;main;alloc_b 1000".to_string(),
        ];
        let f = flame("live", &lines).unwrap();
        assert_eq!(f.total_bytes, 4000);
        let svg = f.svg.unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let titles: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("title"))
            .filter_map(|n| n.text())
            .collect();
        assert!(
            titles.iter().any(|t| t.starts_with("alloc_a (3,000 bytes, 75.00%)")),
            "{titles:?}"
        );
        assert!(
            titles
                .iter()
                .any(|t| t.starts_with("job=1 stage=b (1,000 bytes, 25.00%)")),
            "{titles:?}"
        );
    }

    #[test]
    fn weights_past_usize_are_drawn_scaled_not_overflowed() {
        let lines = vec![
            format!("a;b {}", u64::MAX),
            format!("a;c {}", u64::MAX),
            "a;d 1".to_string(),
        ];
        let f = flame("huge", &lines).unwrap();
        assert!(f.svg.as_deref().unwrap().contains("<svg"));
    }

    #[test]
    fn nothing_to_draw() {
        assert!(flame("x", &[]).unwrap().svg.is_none());
    }
}
