//! Prompts the prefix-cache tests and benchmarks share.

/// About 1,000 tokens of facts (for SmolLM2's tokenizer) that several questions share.
pub fn shared_prefix() -> String {
    let colours = ["red", "blue", "green", "yellow", "white"];
    let things = ["door", "lamp", "boat", "clock", "gate", "bell"];
    let mut text = String::from("Read these facts carefully.\n");
    for i in 0..80 {
        let (c, t) = (colours[i % colours.len()], things[i % things.len()]);
        text.push_str(&format!(
            "Fact {i}: the {c} {t} opens at {}.\n",
            (i * 7) % 24
        ));
    }
    text
}
