#!/usr/bin/env python3
"""Reference data for vlanode's Go tokenizer (tokenizer.TestAgainstReference).

Trains a small byte-level BPE (vocab ~1000) with the Hugging Face
`tokenizers` library, configured exactly like Qwen2's tokenizer.json:

  normalizer     NFC
  pre_tokenizer  Sequence[Split(Regex(<Qwen2 pattern>), "isolated"),
                          ByteLevel(add_prefix_space=False, use_regex=False)]
  model          BPE (no unk token, no dropout), full byte-level alphabet
  decoder        ByteLevel
  post_processor ByteLevel(trim_offsets=False)
  added tokens   Qwen's special tokens after the BPE vocabulary (special,
                 not normalized), plus <think>/</think> (not special, not
                 normalized, as in Qwen3) and <|café|> (normalized, to cover
                 matching added tokens in NFC-normalized text)

then writes, into the directory given by --out:

  tokenizer.json       the trained tokenizer, as `tokenizers` saves it
  cases.json           [{"text", "ids", "tokens", "decoded", "pretokens"}]:
                       ids = encode(text, add_special_tokens=False).ids,
                       decoded = decode(ids, skip_special_tokens=False),
                       pretokens = pre_tokenizer.pre_tokenize_str(text)
                       (regex split + byte-level mapping of the raw text)
  reference_info.json  library versions and the transformers cross-check

Needs Python 3.12 with `tokenizers` (and, optionally, `transformers`, used to
cross-check the ids through PreTrainedTokenizerFast); no network access.

Usage (from the repository root):

  python3 scripts/tokenizer/tokenizer_reference.py --out testdata/tokenizer

then `go test ./tokenizer -run TestAgainstReference -v` and commit
testdata/tokenizer/.
"""

import argparse
import json
import os
import platform
import sys

# The Split regex of Qwen2/Qwen2.5/Qwen3 tokenizer.json (raw string: \r, \n
# stay regex escapes, exactly as in the published files).
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
]

# (content, special, normalized)
EXTRA_ADDED_TOKENS = [
    ("<think>", False, False),
    ("</think>", False, False),
    ("<|caf\u00e9|>", False, True),
]

VOCAB_SIZE = 1000

# Training corpus: English with contractions and numbers, code, whitespace
# runs, newlines, German/French accents, CJK, Korean, Indic, emoji.
CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog didn't care.",
    "I'm sure you'll like it; we've done what they'd said we'd do.",
    "It's 2024 and there are 365 days, 24 hours, 60 minutes and 3600 seconds.",
    "She said: \"Don't worry, I'll be there at 10:30 or 11:45.\"",
    "They're here, you're there, we're everywhere. Isn't that nice?",
    "HE'LL SHOUT AND THEY'VE HEARD IT, BUT I'D RATHER NOT.",
    "The price rose from $19.99 to $24.50 (+22.6%) in Q3 2023.",
    "Call +1 (555) 012-3456 or write to info@example.com before 31/12/2025.",
    "In 1969, 600 million people watched; in 2009, 40 years later, more did.",
    "def greet(name):\n    return f\"Hello, {name}!\"\n\nprint(greet(\"world\"))\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "if x == 1:\n    y = [1, 2, 3]\nelse:\n    y = {\"a\": None}\n",
    "func main() {\n\tfmt.Println(\"hi\")\n\treturn\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "    indented with four spaces\n        and eight spaces\n",
    "tabs\tseparate\tcolumns\t\tand\ttwo\t\ttabs",
    "line one\nline two\n\nline four\n\n\nline seven",
    "windows\r\nline\r\nendings\r\n\r\n",
    "trailing spaces   \n   leading spaces",
    "Grüße aus München! Die Straße ist schön, aber das Wetter ist schlecht.",
    "Ça va très bien, merci. Où est l'hôtel? Le café est à côté de la gare.",
    "Une fenêtre, un château, une forêt, le naïf garçon et sa sœur.",
    "Äpfel, Öl und Übermut; größer, weißer, süßer.",
    "你好，世界！这是一个测试。我们正在训练一个分词器。",
    "中文文本没有空格，所以整段文字会被当作一个词来处理。",
    "日本語のテキストとカタカナ、ひらがなを混ぜます。",
    "한국어 텍스트도 있습니다. 안녕하세요!",
    "हिन्दी में भी कुछ पाठ है। नमस्ते दुनिया।",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "Emoji time: 😀 😃 👍🏽 ❤️ 🎉 🇩🇪 👨\u200d👩\u200d👧 🚀🚀🚀",
    "Mixed中文English混合text123数字 and more",
    "punctuation!!! ... ??? ;-) :: --> <== ((())) [[]] {{}}",
    "https://example.com/path/to/page?query=1&other=two#section",
    "{\"key\": \"value\", \"list\": [1, 2, 3], \"nested\": {\"a\": null}}",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 10000 3.14159 2.71828",
    "Greek αβγ δεζ, Cyrillic привет мир, Arabic مرحبا بالعالم.",
    "A robot arm moves the red cube onto the blue plate, then stops.",
    "Pick up the cup. Open the drawer. Push the button twice.",
    "The camera sees 3 objects: a mug, a spoon and a bowl.",
]
# Repeat so that frequent pairs clearly win; 1000 tokens need some volume.
TRAINING_TEXT = CORPUS * 8

# Test strings: the Go tokenizer must reproduce ids and decoded text.
CASES = [
    "Hello, world!",
    "I'm sure you'll like it; we've done what they'd said.",
    "DON'T SHOUT: I'M HERE, YOU'RE THERE, WE'LL SEE, HE'D KNOW, THEY'VE GONE",
    "it'S mixed'Ll cASE'rE dOn'T",
    "'s 'S 'sa 'hello '' ' x' 'll'",
    "it'\u017f a long s, and the Kelvin sign \u212a",
    "The year 2024 had 366 days; \u03c0\u22483.14159 and \u00bd + \u00b2 + \u216b + \u0663.",
    "Phone: +1 (555) 012-3456, ext. 789",
    "two  spaces, three   spaces,    four",
    "   leading and trailing   ",
    "tabs\tand\t\tdouble tabs\t",
    "line one\nline two\n\nline four\n\n\n",
    "windows\r\nline\r\n\r\nendings",
    "spaces before newline   \n   and after",
    "\n\n\nstarts with newlines",
    "def f(x):\n    return x ** 2  # square\n\nprint(f(12))\n",
    "if (a && b) { return c[i] != d->e; }\n\t// comment",
    "punctuation!!! ... ??? ;-) :: --> <== ((()))",
    "Gr\u00fc\u00dfe aus M\u00fcnchen! \u00c7a va tr\u00e8s bien, merci. O\u00f9 est l'h\u00f4tel?",
    "na\u00efve fa\u00e7ade co\u00f6perate r\u00e9sum\u00e9 \u00c5ngstr\u00f6m",
    "Stra\u00dfe \u00df SS \u1e9e",
    "Cafe\u0301 (decomposed) vs Caf\u00e9 (composed)",
    "\u1100\u1161\u11a8 (jamo) vs \uac01",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u30ab\u30bf\u30ab\u30ca\u3001\u3072\u3089\u304c\u306a\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\ub3c4 \uc788\uc2b5\ub2c8\ub2e4.",
    "Emoji: \U0001F600\U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F1E9\U0001F1EA \u2764\ufe0f",
    "Mixed\u4e2d\u6587English\u6df7\u5408text123\u6570\u5b57",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092a\u093e\u0920 \u0914\u0930 \u0e44\u0e17\u0e22 \u0e20\u0e32\u0e29\u0e32",
    "spaces:\u00a0nbsp,\u3000ideographic,\u2003em,\u2028line-sep,\u0085nel,\u000bvt,\u000cff",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|vision_start|><|image_pad|><|image_pad|><|image_pad|><|vision_end|>Describe this image.",
    "text<|endoftext|>more text <|endoftext|> spaced  <|endoftext|>  twice",
    "<|im_start|><|im_end|><|im_start|>",
    "partial <|im_start tokens <|im_end| and |> <| stay plain text",
    "<think>\nreasoning here\n</think>\n\nanswer",
    "e<|im_end|>\u0301 combining mark right after a special token",
    "normalized added token: <|cafe\u0301|> and <|caf\u00e9|>",
    "",
    " ",
    "\t \n \r\n \u00a0 ",
    "a" * 300,
    "The quick brown fox jumps over the lazy dog. " * 20,
    "0123456789" * 5,
    "x" + "!" * 50 + "\n" * 3,
    "\x00\x01\x1b[31mred\x1b[0m\x7f",
    "https://example.com/path?q=1&r=two#frag",
    "{\"key\": \"value\", \"list\": [1, 2, 3], \"nested\": {\"a\": null}}",
]


def build_tokenizer():
    """Trains the Qwen2-style byte-level BPE and adds the added tokens."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)

    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(TRAINING_TEXT, trainer=trainer, length=len(TRAINING_TEXT))

    # As in Qwen, the added tokens come after the BPE vocabulary.
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    )
    tok.add_tokens(
        [
            AddedToken(content, special=special, normalized=normalized)
            for content, special, normalized in EXTRA_ADDED_TOKENS
        ]
    )
    return tok


def check_config(path):
    """Fails if the saved file is not configured like Qwen2's."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    split, byte_level = doc["pre_tokenizer"]["pretokenizers"]
    problems = []
    if doc["model"]["type"] != "BPE":
        problems.append("model type %r" % doc["model"]["type"])
    if split.get("pattern") != {"Regex": QWEN2_PATTERN}:
        problems.append("split pattern %r" % split.get("pattern"))
    if split.get("behavior") != "Isolated" or split.get("invert"):
        problems.append("split behavior %r invert %r" % (split.get("behavior"), split.get("invert")))
    if byte_level.get("add_prefix_space") or byte_level.get("use_regex", True):
        problems.append("byte level %r" % byte_level)
    if doc["normalizer"] != {"type": "NFC"}:
        problems.append("normalizer %r" % doc["normalizer"])
    if doc["decoder"]["type"] != "ByteLevel":
        problems.append("decoder %r" % doc["decoder"])
    if problems:
        sys.exit("tokenizer.json is not configured like Qwen2: " + "; ".join(problems))
    return doc


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output directory, e.g. testdata/tokenizer")
    args = parser.parse_args()

    import tokenizers
    from tokenizers import Tokenizer

    os.makedirs(args.out, exist_ok=True)
    tok_path = os.path.join(args.out, "tokenizer.json")
    build_tokenizer().save(tok_path, pretty=True)
    doc = check_config(tok_path)

    # Encode with the tokenizer as loaded from the file, as Go will.
    ref = Tokenizer.from_file(tok_path)
    cases = []
    for text in CASES:
        enc = ref.encode(text, add_special_tokens=False)
        cases.append(
            {
                "text": text,
                "ids": enc.ids,
                "tokens": enc.tokens,
                "decoded": ref.decode(enc.ids, skip_special_tokens=False),
                "pretokens": [p for p, _ in ref.pre_tokenizer.pre_tokenize_str(text)],
            }
        )
    info = {
        "python": platform.python_version(),
        "tokenizers": tokenizers.__version__,
        "vocab_size_with_added": ref.get_vocab_size(with_added_tokens=True),
        "model_vocab_size": len(doc["model"]["vocab"]),
        "merges": len(doc["model"]["merges"]),
        "cases": len(cases),
    }

    # Cross-check through transformers, when it is installed.
    try:
        import transformers
        from transformers import PreTrainedTokenizerFast
    except ImportError:
        info["transformers"] = None
        print("transformers not installed: skipping the cross-check", file=sys.stderr)
    else:
        info["transformers"] = transformers.__version__
        fast = PreTrainedTokenizerFast(tokenizer_file=tok_path)
        mismatches = []
        for case in cases:
            ids = fast.encode(case["text"], add_special_tokens=False)
            text = fast.decode(case["ids"], skip_special_tokens=False, clean_up_tokenization_spaces=False)
            if ids != case["ids"] or text != case["decoded"]:
                mismatches.append(case["text"])
        info["transformers_mismatches"] = mismatches
        if mismatches:
            print(
                "WARNING: transformers disagrees with tokenizers on %d cases: %r"
                % (len(mismatches), mismatches),
                file=sys.stderr,
            )

    with open(os.path.join(args.out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=True, indent=1)
        f.write("\n")
    with open(os.path.join(args.out, "reference_info.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print(
        "wrote %s, %d cases (tokenizers %s, %d merges, %d ids) to %s"
        % (os.path.basename(tok_path), len(cases), info["tokenizers"], info["merges"],
           info["vocab_size_with_added"], args.out)
    )


if __name__ == "__main__":
    main()
