"""core.text.language: whether a text looks like the model's source language — both branches, the short-text rule,
the copied-words evidence."""

from __future__ import annotations

import pytest

from core.text.language import MIN_WORDS, check_language


def test_english_into_a_portuguese_model_warns_naming_both_languages() -> None:
    found = check_language("The weather is very cold today and I want to stay at home.", "pt", "en")
    assert found.warns and found.verdict == "other language" and found.looks_like == "en"
    assert found.source_probability is not None and found.source_probability < 0.001
    message = found.message()
    assert message is not None
    assert message.startswith("This text looks like English; this model translates Portuguese → English")
    assert "English >99.9%" in message and "Portuguese <0.1%" in message


@pytest.mark.parametrize(
    ("text", "looks_like", "script"),
    [
        ("الطقس بارد جدا اليوم وأريد البقاء في المنزل.", "ar", "Arabic"),
        ("今天天气很冷，我想待在家里。", "zh", "Han"),
        ("Сегодня очень холодно, и я хочу остаться дома.", "ru", "Cyrillic"),
    ],
)
def test_another_script_warns_with_its_share_of_letters(text: str, looks_like: str, script: str) -> None:
    found = check_language(text, "en", "pt")
    assert found.verdict == "other script" and found.script == script and found.source_script_share == 0.0
    assert found.looks_like == looks_like
    message = found.message()
    assert message is not None and "this model translates English → Portuguese" in message
    assert "100% of its letters are not Latin" in message


def test_another_script_the_identifier_cannot_name_is_named_by_its_script() -> None:
    """Russian and Ukrainian share the probability of a short Cyrillic text: neither reaches 90 %."""
    found = check_language("Где ближайший вокзал?", "en", "pt")
    assert found.warns and found.looks_like is None
    assert (found.message() or "").startswith("This text is written in Cyrillic script; this model translates")


@pytest.mark.parametrize(
    ("text", "source"),
    [
        ("The weather is very cold today and I want to stay at home.", "en"),
        ("O tempo está muito frio hoje e eu quero ficar em casa.", "pt"),
        ("Quanto custa esta camisa?", "pt"),  # the identifier's top language is Spanish (60 %), Portuguese 33 %
        ("Mein Bruder arbeitet in einem Krankenhaus in der Stadt.", "de"),
    ],
)
def test_the_source_language_does_not_warn(text: str, source: str) -> None:
    found = check_language(text, source, "xx")
    assert not found.warns and found.verdict == "source language" and found.message() is None


def test_german_into_an_english_model_warns() -> None:
    found = check_language("Sie wusste nicht, dass der letzte Zug schon abgefahren war.", "en", "pt")
    assert found.verdict == "other language" and found.looks_like == "de"


@pytest.mark.parametrize(
    "text",
    ["Anna", "42", "3,14", "OK", "Good morning", "Olá Pedro", "Maria Silva", "João Pedro Oliveira Santos",
     "Gabriel García Márquez", "Rio de Janeiro", "Ich liebe dich", "Москва", "Владимир Путин", "你好", ""],
)  # fmt: skip
@pytest.mark.parametrize(("source", "target"), [("en", "pt"), ("pt", "en")])
def test_short_texts_names_and_numbers_are_not_judged(text: str, source: str, target: str) -> None:
    found = check_language(text, source, target)
    assert found.verdict == "too short" and not found.warns and found.message() is None


def test_the_minimum_length_is_min_words_words_without_capitals() -> None:
    """'Ich liebe dich' has two lower-case words: not judged; one more and it is German."""
    assert MIN_WORDS == 3
    short, long = check_language("Ich liebe dich", "en", "pt"), check_language("Ich liebe dich sehr", "en", "pt")
    assert (short.words, short.verdict) == (2, "too short")
    assert (long.words, long.verdict, long.looks_like) == (3, "other language", "de")
    assert check_language("你好吗", "en", "pt").verdict == "other script"  # a Han character is a word


def test_a_language_the_identifier_does_not_know_is_not_judged() -> None:
    found = check_language("The weather is very cold today and I want to stay at home.", "src", "tgt")
    assert found.verdict == "unknown language" and found.message() is None


def test_copied_words_are_named_when_most_of_the_output_is_copied() -> None:
    text = "The weather is very cold today and I want to stay at home."
    copied = check_language(text, "pt", "en", output=text)
    assert copied.copied == (13, 13)
    assert (copied.message() or "").endswith("13 of the 13 output words are input words, copied unchanged.")
    translated = check_language(text, "pt", "en", output="O tempo está muito frio hoje.")
    assert translated.copied == (0, 6) and "copied" not in (translated.message() or "")
    assert translated.warns


def test_another_language_on_top_is_not_enough_while_the_source_is_likely() -> None:
    """A built-in Portuguese sentence the identifier ranks Spanish first: no warning, Portuguese is still 33 %."""
    found = check_language("Quanto custa esta camisa?", "pt", "en")
    assert found.probabilities[0][0] == "es" and found.source_probability is not None
    assert found.source_probability > 0.1 and not found.warns and found.looks_like is None
