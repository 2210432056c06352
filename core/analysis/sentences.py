"""The built-in sentences head statistics are aggregated over: a few hundred per source language, written
for this project (no corpus licence involved), deterministic, varied in length and structure."""

from __future__ import annotations

import functools
import random

_EN = {
    "subjects": [
        "The old farmer",
        "My sister",
        "A young teacher",
        "The tired doctor",
        "Our neighbour",
        "The little boy",
        "A friendly waiter",
        "The new student",
        "His grandmother",
        "The quiet painter",
        "Two children",
        "The police officer",
    ],
    "verbs": ["bought", "found", "painted", "sold", "carried", "lost", "washed", "opened", "closed", "repaired"],
    "objects": [
        "a blue bicycle",
        "the heavy box",
        "an old map",
        "a small boat",
        "the red door",
        "a warm coat",
        "the broken window",
        "three books",
        "a wooden chair",
        "the kitchen table",
    ],
    "when": [
        "yesterday",
        "this morning",
        "last summer",
        "after dinner",
        "before school",
        "on Sunday",
        "in the evening",
        "two weeks ago",
    ],
    "fixed": [
        "Where is the station?",
        "I do not like cold coffee.",
        "Can you help me, please?",
        "The weather is beautiful today.",
        "We are going to the beach tomorrow.",
        "She has never seen the sea.",
        "How much does this cost?",
        "They live in a small house near the river.",
        "If it rains, we will stay at home.",
        "The book that you gave me is very interesting.",
        "He said that he would come later.",
        "Why did you leave so early?",
        "The dog bit the man.",
        "The man bit the dog.",
        "I think, therefore I am.",
        "It is ten o'clock and the shop is still closed.",
        "My brother works in a hospital in the city.",
        "Do you want tea or coffee?",
        "The children were playing in the garden when it started to snow.",
        "Nobody knows the answer.",
        "Please close the door.",
        "We waited for the bus for an hour.",
        "The film was longer than the book.",
        "She speaks three languages fluently.",
        "What time does the train leave?",
        "Every morning he drinks a glass of milk.",
        "The museum opens at nine.",
        "I have lost my keys again.",
        "The soup is too hot to eat.",
        "Our teacher explained the lesson twice.",
    ],
}
_PT = {
    "subjects": [
        "O velho agricultor",
        "A minha irmã",
        "Uma jovem professora",
        "O médico cansado",
        "O nosso vizinho",
        "O menino",
        "Um garçom simpático",
        "O novo aluno",
        "A avó dele",
        "O pintor calado",
        "Duas crianças",
        "O policial",
    ],
    "verbs": [
        "comprou",
        "encontrou",
        "pintou",
        "vendeu",
        "carregou",
        "perdeu",
        "lavou",
        "abriu",
        "fechou",
        "consertou",
    ],
    "objects": [
        "uma bicicleta azul",
        "a caixa pesada",
        "um mapa antigo",
        "um barco pequeno",
        "a porta vermelha",
        "um casaco quente",
        "a janela quebrada",
        "três livros",
        "uma cadeira de madeira",
        "a mesa da cozinha",
    ],
    "when": [
        "ontem",
        "hoje de manhã",
        "no verão passado",
        "depois do jantar",
        "antes da escola",
        "no domingo",
        "à noite",
        "há duas semanas",
    ],
    "fixed": [
        "Onde fica a estação?",
        "Eu não gosto de café frio.",
        "Você pode me ajudar, por favor?",
        "O tempo está lindo hoje.",
        "Vamos à praia amanhã.",
        "Ela nunca viu o mar.",
        "Quanto custa isto?",
        "Eles moram numa casa pequena perto do rio.",
        "Se chover, ficaremos em casa.",
        "O livro que você me deu é muito interessante.",
        "Ele disse que viria mais tarde.",
        "Por que você saiu tão cedo?",
        "O cão mordeu o homem.",
        "O homem mordeu o cão.",
        "São dez horas e a loja ainda está fechada.",
        "O meu irmão trabalha num hospital da cidade.",
        "Você quer chá ou café?",
        "As crianças brincavam no jardim quando começou a nevar.",
        "Ninguém sabe a resposta.",
        "Por favor, feche a porta.",
        "Esperamos o ônibus durante uma hora.",
        "O filme era mais longo do que o livro.",
        "Ela fala três línguas fluentemente.",
        "A que horas parte o comboio?",
        "Todas as manhãs ele bebe um copo de leite.",
        "O museu abre às nove.",
        "Perdi as minhas chaves outra vez.",
        "A sopa está quente demais para comer.",
        "A nossa professora explicou a lição duas vezes.",
        "Penso, logo existo.",
    ],
}
TEMPLATES = {"en": _EN, "pt": _PT}
N_SENTENCES = 240


def builtin_sentences(language: str, n: int = N_SENTENCES) -> tuple[list[str], str]:
    """(sentences, language used): ``n`` sentences in ``language`` — English when there are none in it."""
    made, used = _builtin(language, n)
    return list(made), used


@functools.lru_cache(maxsize=16)
def _builtin(language: str, n: int) -> tuple[tuple[str, ...], str]:
    """``builtin_sentences``, made once per (language, n): shuffling the combinations takes ~16 ms, and the app
    asks at every rerun whether the set's statistics are on disk."""
    used = language if language in TEMPLATES else "en"
    t = TEMPLATES[used]
    rng = random.Random(0)
    combos = [(s, v, o, w) for s in t["subjects"] for v in t["verbs"] for o in t["objects"] for w in t["when"]]
    rng.shuffle(combos)
    made = [f"{s} {v} {o} {w}." for s, v, o, w in combos[: max(0, n - len(t["fixed"]))]]
    # every third one joins two clauses, so longer sentences (20–30 pieces) are in the set too
    joiner = " and " if used == "en" else " e "
    for i in range(0, len(made) - 1, 3):
        made[i] = made[i][:-1] + joiner + made[i + 1][0].lower() + made[i + 1][1:]
    return tuple((list(t["fixed"]) + made)[:n]), used
