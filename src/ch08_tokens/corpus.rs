//! The default corpus: where it comes from, how to load it, and how to load a replacement.
//!
//! The crate owns its training text. `data/corpus.txt` was written once by [`generate`] (seed
//! [`CORPUS_SEED`]) from the small English grammar in this file, and is committed, so every number
//! the chapter prints (merges, losses, samples) is computed from that frozen file; a test checks
//! that the grammar still reproduces it byte for byte. Nothing in it is copied from anywhere: the
//! word lists and sentence frames below were written for this crate (MIT, like the code).
//!
//! The grammar is built to have structure at several distances, so that a model with a long
//! context can beat one with a short one:
//! - inside a word and a sentence (spelling, agreement of *a*/*an*, punctuation);
//! - across a paragraph: a story introduces a person, a pet, a place and an object, and keeps
//!   referring back to them by name and by the right pronoun; a question-and-answer piece asks
//!   about facts stated a few lines earlier; sums and calendars give an answer fixed by the
//!   numbers or days named before it.
//!
//! Any UTF-8 text file can replace the default: [`load`] reads it and refuses invalid UTF-8 (with
//! the line and byte offset) and empty files.

use crate::error::{Error, Result};
use crate::rng::Rng;
use std::path::Path;

/// The frozen default corpus, `data/corpus.txt`, as compiled into the crate.
pub const DEFAULT_CORPUS: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/data/corpus.txt"));

/// The seed [`generate`] was called with to write `data/corpus.txt`.
pub const CORPUS_SEED: u64 = 2025;

/// [`generate`] adds pieces until the text holds at least this many bytes.
pub const TARGET_BYTES: usize = 250_000;

/// The share of the corpus (at its end, from a piece boundary on) held out for validation.
pub const VALIDATION_FRACTION: f64 = 0.1;

/// The default corpus.
pub fn default_corpus() -> &'static str {
    DEFAULT_CORPUS
}

/// Reads a UTF-8 text file to use as a corpus instead of the default.
///
/// Errors: [`Error::Io`] when the file cannot be read; [`Error::Parse`] naming the file, the
/// 1-based line and the byte offset of the first byte that is not valid UTF-8;
/// [`Error::InvalidValue`] when the file is empty.
#[deny(clippy::unwrap_used, clippy::expect_used)]
pub fn load(path: impl AsRef<Path>) -> Result<String> {
    let path = path.as_ref();
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| Error::Io { path: name.clone(), source })?;
    from_bytes(&name, bytes)
}

/// Checks raw bytes as a corpus: valid UTF-8 and not empty. `name` names the source in errors.
#[deny(clippy::unwrap_used, clippy::expect_used)]
pub fn from_bytes(name: &str, bytes: Vec<u8>) -> Result<String> {
    if bytes.is_empty() {
        return Err(Error::Parse {
            file: name.to_string(),
            line: None,
            reason: "the corpus is empty".into(),
        });
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let line = 1 + bytes.iter().take(at).filter(|&&b| b == b'\n').count();
        // `valid_up_to` is the offset of a byte that exists (the one that broke the decoding).
        let byte =
            bytes.get(at).map_or_else(|| "end of input".to_string(), |b| format!("0x{b:02X}"));
        Error::Parse {
            file: name.to_string(),
            line: Some(line),
            reason: format!("byte {at} ({byte}) is not valid UTF-8; a corpus must be UTF-8 text"),
        }
    })
}

/// Splits a corpus into a training part and a validation part: the last
/// [`VALIDATION_FRACTION`] of the bytes, moved forward to the start of the next line so no word or
/// line is cut. Texts without a suitable line break are split at the nearest character boundary.
/// Both parts are non-empty for any text of two or more characters.
pub fn split(text: &str) -> (&str, &str) {
    let n = text.len();
    let mut cut = ((n as f64) * (1.0 - VALIDATION_FRACTION)).round() as usize;
    cut = cut.min(n);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    if let Some(nl) = text[cut..].find('\n') {
        let after = cut + nl + 1;
        if after < n {
            cut = after;
        }
    }
    if cut >= n {
        // No room after the cut: hold out the last character.
        cut = text.char_indices().last().map_or(0, |(i, _)| i);
    }
    if cut == 0 {
        // Keep at least one character for training.
        cut = text.chars().next().map_or(0, char::len_utf8);
    }
    (&text[..cut], &text[cut..])
}

// ───────────────────────────── the grammar's word lists ─────────────────────────────

const WOMEN: &[&str] = &[
    "Mira", "Anna", "Lena", "Tessa", "Ida", "Rosa", "Nell", "Greta", "Hazel", "Iris", "Maya",
    "Clara", "Elsie", "Fiona", "Kira", "Lucy", "Nora", "Opal", "Petra", "Ruth", "Sara", "Vera",
    "Wanda", "Zoe", "Alma", "Bea", "Dora", "Edith", "Freya", "Juno",
];
const MEN: &[&str] = &[
    "Tomas", "Bikram", "Oskar", "Felix", "Hugo", "Ivan", "Jonah", "Karl", "Leo", "Milo", "Nils",
    "Otto", "Pavel", "Quinn", "Rafi", "Sami", "Theo", "Umar", "Viktor", "Wes", "Yusuf", "Abel",
    "Bram", "Cyril", "Dev", "Emil", "Finn", "Gus", "Hal", "Ivo",
];

const PLACE_START: &[&str] = &[
    "Elm", "Ash", "Bram", "Cold", "Fern", "Gold", "Hollow", "Iron", "Lark", "Mill", "Oak", "Pine",
    "Raven", "Salt", "Stone", "Thorn", "Willow", "Wren", "Amber", "Brook", "Copper", "Dun", "Moss",
    "Red",
];
const PLACE_END: &[&str] = &[
    "ford", "wick", "dale", "mere", "field", "haven", "stead", "bury", "gate", "moor", "ton",
    "holm",
];
const RIVERS: &[&str] = &[
    "Tamsel", "Orrin", "Vell", "Lune", "Brisk", "Hadder", "Kell", "Sorrel", "Amble", "Nith",
    "Wend", "Coble",
];
const REGIONS: &[&str] = &["north", "south", "east", "west"];
const LANDSCAPES: &[&str] = &["valley", "hills", "marshes", "plain", "forest", "coast"];
const SETTLEMENTS: &[&str] = &["village", "town", "hamlet", "market town", "harbour town"];
const PLACE_ADJ: &[&str] =
    &["quiet", "busy", "small", "windy", "sleepy", "green", "old", "muddy", "cheerful", "foggy"];
const BUILDINGS: &[&str] = &[
    "stone bridge",
    "bell tower",
    "old mill",
    "town hall",
    "chapel",
    "lighthouse",
    "granary",
    "inn",
];

/// A trade: its name, where it is done, what its worker did each day, and what it makes.
struct Trade {
    name: &'static str,
    plural: &'static str,
    workplace: &'static str,
    routine: &'static str,
    product: &'static str,
}

const TRADES: &[Trade] = &[
    Trade {
        name: "baker",
        plural: "bakers",
        workplace: "bakery",
        routine: "baked bread for the whole village",
        product: "bread",
    },
    Trade {
        name: "smith",
        plural: "smiths",
        workplace: "forge",
        routine: "mended pots and shod horses",
        product: "horseshoes",
    },
    Trade {
        name: "weaver",
        plural: "weavers",
        workplace: "loom house",
        routine: "wove blankets of soft wool",
        product: "blankets",
    },
    Trade {
        name: "fisher",
        plural: "fishers",
        workplace: "harbour",
        routine: "cast nets into the cold water",
        product: "smoked fish",
    },
    Trade {
        name: "potter",
        plural: "potters",
        workplace: "workshop",
        routine: "shaped bowls from red clay",
        product: "bowls",
    },
    Trade {
        name: "shepherd",
        plural: "shepherds",
        workplace: "hillside hut",
        routine: "led the sheep up the hill",
        product: "wool",
    },
    Trade {
        name: "miller",
        plural: "millers",
        workplace: "mill",
        routine: "ground wheat into flour",
        product: "flour",
    },
    Trade {
        name: "carpenter",
        plural: "carpenters",
        workplace: "workshop",
        routine: "built chairs and tables",
        product: "chairs",
    },
    Trade {
        name: "gardener",
        plural: "gardeners",
        workplace: "garden",
        routine: "grew beans and roses",
        product: "roses",
    },
    Trade {
        name: "teacher",
        plural: "teachers",
        workplace: "school",
        routine: "taught the children to read",
        product: "lessons",
    },
    Trade {
        name: "beekeeper",
        plural: "beekeepers",
        workplace: "orchard",
        routine: "looked after the hives",
        product: "honey",
    },
    Trade {
        name: "clockmaker",
        plural: "clockmakers",
        workplace: "shop",
        routine: "repaired clocks of every size",
        product: "clocks",
    },
    Trade {
        name: "painter",
        plural: "painters",
        workplace: "studio",
        routine: "painted pictures of the sky",
        product: "paintings",
    },
    Trade {
        name: "cook",
        plural: "cooks",
        workplace: "kitchen",
        routine: "made soup for travellers",
        product: "soup",
    },
    Trade {
        name: "farmer",
        plural: "farmers",
        workplace: "farm",
        routine: "planted wheat and barley",
        product: "barley",
    },
    Trade {
        name: "tailor",
        plural: "tailors",
        workplace: "shop",
        routine: "sewed coats and scarves",
        product: "coats",
    },
    Trade {
        name: "healer",
        plural: "healers",
        workplace: "cottage",
        routine: "made medicine from herbs",
        product: "medicine",
    },
    Trade {
        name: "librarian",
        plural: "librarians",
        workplace: "library",
        routine: "looked after the old books",
        product: "maps",
    },
    Trade {
        name: "candle maker",
        plural: "candle makers",
        workplace: "shop",
        routine: "dipped candles in warm wax",
        product: "candles",
    },
    Trade {
        name: "boat builder",
        plural: "boat builders",
        workplace: "boatyard",
        routine: "built boats of oak",
        product: "boats",
    },
];

/// An animal: its name, the sound it made, and a habit.
struct Animal {
    name: &'static str,
    sound: &'static str,
    habit: &'static str,
}

const ANIMALS: &[Animal] = &[
    Animal { name: "dog", sound: "barked", habit: "loved to chase sticks" },
    Animal { name: "cat", sound: "purred", habit: "slept in the sun all day" },
    Animal { name: "goat", sound: "bleated", habit: "ate everything it could find" },
    Animal { name: "owl", sound: "hooted", habit: "only woke up at night" },
    Animal { name: "crow", sound: "cawed", habit: "collected shiny things" },
    Animal { name: "horse", sound: "neighed", habit: "could run faster than the wind" },
    Animal { name: "rabbit", sound: "thumped its foot", habit: "was afraid of thunder" },
    Animal { name: "duck", sound: "quacked", habit: "swam in the pond every morning" },
    Animal { name: "fox", sound: "yipped", habit: "was clever and a little sly" },
    Animal { name: "pig", sound: "grunted", habit: "liked to roll in the mud" },
    Animal { name: "parrot", sound: "squawked", habit: "could say three words" },
    Animal { name: "hedgehog", sound: "snuffled", habit: "curled into a ball when it was scared" },
    Animal { name: "mouse", sound: "squeaked", habit: "hid crumbs in its nest" },
    Animal { name: "donkey", sound: "brayed", habit: "refused to walk in the rain" },
];

const PET_NAMES: &[&str] = &[
    "Pip", "Biscuit", "Juniper", "Moss", "Pepper", "Sable", "Tuft", "Clover", "Ember", "Ginger",
    "Button", "Rook", "Whisk", "Puddle", "Nutmeg", "Bramble", "Sprout", "Cinder",
];

const OBJECTS: &[&str] = &[
    "key", "map", "lantern", "coin", "letter", "feather", "box", "ring", "book", "shell", "bell",
    "compass", "mirror", "flute", "seed", "stone", "spoon", "button",
];
const OBJECT_ADJ: &[&str] = &[
    "silver", "golden", "rusty", "tiny", "heavy", "wooden", "blue", "painted", "cracked",
    "shining", "ancient", "old", "green",
];
const LANDMARKS: &[&str] = &[
    "old bridge",
    "village well",
    "oak tree",
    "market square",
    "river bank",
    "orchard wall",
    "harbour steps",
    "crossroads",
    "chapel door",
    "duck pond",
];
const DAYS: &[&str] =
    &["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
const MONTHS: &[&str] = &[
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const SEASONS: &[&str] = &["spring", "summer", "autumn", "winter"];
const TIMES: &[&str] = &["morning", "afternoon", "evening", "night"];
const WEATHER: &[&str] = &["rainy", "mild", "cold", "warm", "dry", "windy", "snowy", "foggy"];
const FEELINGS: &[&str] = &["glad", "surprised", "grateful", "happy", "amazed", "relieved"];
const GIFTS: &[&str] = &[
    "a basket of apples",
    "a warm scarf",
    "a jar of honey",
    "a small painting",
    "a bag of seeds",
    "a new hat",
    "a loaf of sweet bread",
    "a wooden whistle",
];
const EXCLAIMS: &[&str] = &[
    "How strange",
    "What a curious thing",
    "Well, look at that",
    "I have never seen anything like it",
    "Who could have lost this",
    "Now that is a puzzle",
];
const FRUITS: &[&str] =
    &["apples", "pears", "plums", "eggs", "carrots", "lemons", "walnuts", "cherries"];
const MORALS: &[&str] = &[
    "Slow work done well lasts longer than quick work done badly.",
    "A friend who shares is richer than a king who hoards.",
    "Do not judge a stranger by the dust on their boots.",
    "Those who listen learn more than those who shout.",
    "Pride is a heavy coat to wear in summer.",
    "Many small hands can lift a great stone.",
    "A promise kept is worth more than gold.",
    "Whoever plants a tree is thinking of others.",
    "Help given freely comes back when it is needed.",
    "Boasting runs fast but it does not run far.",
];
const FABLE_ADJ: &[&str] = &[
    "proud", "kind", "clever", "lazy", "hungry", "young", "old", "careful", "boastful", "patient",
];

const ONES: &[&str] = &[
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
const TENS: &[&str] =
    &["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"];

/// An English number word for 0 ≤ n ≤ 999 ("forty-two", "one hundred and seven").
pub fn number_words(n: usize) -> String {
    match n {
        0..=19 => ONES[n].to_string(),
        20..=99 => {
            let (t, o) = (n / 10, n % 10);
            if o == 0 { TENS[t].to_string() } else { format!("{}-{}", TENS[t], ONES[o]) }
        }
        100..=999 => {
            let (h, rest) = (n / 100, n % 100);
            if rest == 0 {
                format!("{} hundred", ONES[h])
            } else {
                format!("{} hundred and {}", ONES[h], number_words(rest))
            }
        }
        _ => n.to_string(),
    }
}

/// "a" or "an" before `word`, by its first letter.
fn a(word: &str) -> String {
    let article =
        if word.starts_with(['a', 'e', 'i', 'o', 'A', 'E', 'I', 'O']) { "an" } else { "a" };
    format!("{article} {word}")
}

fn capital(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

// ───────────────────────────── the generator ─────────────────────────────

/// Who a piece is about, with the pronouns that must agree with the name.
#[derive(Clone)]
struct Person {
    name: &'static str,
    he: &'static str,
    him: &'static str,
    his: &'static str,
}

struct Gen {
    rng: Rng,
}

impl Gen {
    fn pick<T: Copy>(&mut self, list: &[T]) -> T {
        list[self.rng.below(list.len())]
    }

    fn pick_index(&mut self, len: usize) -> usize {
        self.rng.below(len)
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.next_f64() < p
    }

    fn person(&mut self) -> Person {
        if self.chance(0.5) {
            Person { name: self.pick(WOMEN), he: "she", him: "her", his: "her" }
        } else {
            Person { name: self.pick(MEN), he: "he", him: "him", his: "his" }
        }
    }

    fn other_person(&mut self, not: &[&str]) -> Person {
        loop {
            let p = self.person();
            if !not.contains(&p.name) {
                return p;
            }
        }
    }

    fn place(&mut self) -> String {
        format!("{}{}", self.pick(PLACE_START), self.pick(PLACE_END))
    }

    fn other_place(&mut self, not: &[&str]) -> String {
        loop {
            let p = self.place();
            if !not.contains(&p.as_str()) {
                return p;
            }
        }
    }

    fn trade(&mut self) -> &'static Trade {
        &TRADES[self.pick_index(TRADES.len())]
    }

    fn animal(&mut self) -> &'static Animal {
        &ANIMALS[self.pick_index(ANIMALS.len())]
    }

    /// A story: a person, their pet, a found object, a journey to its owner, a gift, an ending.
    fn story(&mut self) -> String {
        let hero = self.person();
        let trade = self.trade();
        let home = self.place();
        let river = self.pick(RIVERS);
        let pet_kind = self.animal();
        let pet = self.pick(PET_NAMES);
        let object = self.pick(OBJECTS);
        let object_adj = self.pick(OBJECT_ADJ);
        let landmark = self.pick(LANDMARKS);
        let owner = self.other_person(&[hero.name]);
        let away = self.other_place(&[&home]);
        let helper = self.trade();
        let (h, n) = (&hero, hero.name);

        let title = match self.pick_index(3) {
            0 => format!("The {} {}", capital(object_adj), capital(object)),
            1 => format!("{n} and the {} {}", capital(object_adj), capital(object)),
            _ => format!("The {} of {home}", capital(object)),
        };
        let mut s = vec![];
        s.push(match self.pick_index(4) {
            0 => format!(
                "Once upon a time, in the {} {} of {home}, there lived {} named {n}.",
                self.pick(PLACE_ADJ),
                self.pick(SETTLEMENTS),
                a(trade.name)
            ),
            1 => format!(
                "Long ago, {} called {n} lived in {home}, close to the {river} river.",
                a(trade.name)
            ),
            2 => format!(
                "In {home}, where the {river} river bends, there was {} named {n}.",
                a(trade.name)
            ),
            _ => format!(
                "There was once {} {} named {n} who lived in {home}.",
                a(self.pick(FABLE_ADJ)),
                trade.name
            ),
        });
        s.push(match self.pick_index(2) {
            0 => format!(
                "{} had {} named {pet}, who {}.",
                capital(h.he),
                a(pet_kind.name),
                pet_kind.habit
            ),
            _ => format!(
                "{n} lived with {} called {pet}. The {} {}.",
                a(pet_kind.name),
                pet_kind.name,
                pet_kind.habit
            ),
        });
        let day = self.pick(DAYS);
        s.push(match self.pick_index(3) {
            0 => format!("Every {}, {n} {}.", self.pick(TIMES), trade.routine),
            1 => format!(
                "On {day}s {} {}, and {pet} waited by the door of the {}.",
                h.he, trade.routine, trade.workplace
            ),
            _ => format!(
                "{n} worked hard: {} {}, and at night {} counted the stars.",
                h.he, trade.routine, h.he
            ),
        });
        let when = format!("One {} in {}", self.pick(TIMES), self.pick(SEASONS));
        s.push(format!("{when}, {n} found {} {object} near the {landmark}.", a(object_adj)));
        let exclaim = self.pick(EXCLAIMS);
        s.push(match self.pick_index(2) {
            0 => format!("\"{exclaim},\" said {n}. \"Where could this {object} have come from?\""),
            _ => format!(
                "\"{exclaim}!\" {n} said to {pet}. \"Somebody must be missing this {object}.\""
            ),
        });
        s.push(format!("{pet} {} and sniffed the {object}.", pet_kind.sound));
        let mut second = vec![];
        second.push(format!(
            "{n} took the {object} to the {} of {} old {}, who knew everyone in {home}.",
            helper.workplace,
            if helper.name == trade.name { "another" } else { "the" },
            helper.name
        ));
        second.push(format!(
            "The {} turned it over twice and said, \"This {object} belongs to {} of {away}. {} lost it on the road last {}.\"",
            helper.name,
            owner.name,
            capital(owner.he),
            self.pick(SEASONS)
        ));
        let days = 2 + self.pick_index(6);
        second.push(match self.pick_index(3) {
            0 => format!("So {n} and {pet} set out for {away}. The road took {} days.", number_words(days)),
            1 => format!("The next {day}, {n} packed some {} and walked to {away} with {pet}.", trade.product),
            _ => format!("{n} left the {} in the care of a neighbour and went to {away}, with {pet} close behind.", trade.workplace),
        });
        let feeling = self.pick(FEELINGS);
        let gift = self.pick(GIFTS);
        second.push(format!(
            "When {n} reached {away}, {} found {} and gave back the {object_adj} {object}.",
            h.he, owner.name
        ));
        second.push(format!(
            "{} was so {feeling} that {} gave {n} {gift} and asked about {home} and the {river} river.",
            owner.name, owner.he
        ));
        let ending = match self.pick_index(4) {
            0 => format!(
                "From that day on, {n} and {} were good friends, and {pet} was welcome in {away}.",
                owner.name
            ),
            1 => format!(
                "Every {} after that, {n} visited {} in {away}.",
                self.pick(SEASONS),
                owner.name
            ),
            2 => format!(
                "Back in {home}, {n} kept {gift} above the {} door and smiled whenever {} saw it.",
                trade.workplace, h.he
            ),
            _ => format!(
                "And so {n} went home to {home}, and {pet} never left {} side again.",
                h.his
            ),
        };
        second.push(ending);
        format!("{title}\n{}\n{}\n", s.join(" "), second.join(" "))
    }

    /// A short fact sheet about a place.
    fn town(&mut self) -> String {
        let place = self.place();
        let river = self.pick(RIVERS);
        let other = self.other_place(&[&place]);
        let third = self.other_place(&[&place, &other]);
        let t1 = self.trade();
        let t2 = loop {
            let t = self.trade();
            if t.name != t1.name {
                break t;
            }
        };
        let people = 200 + 50 * self.pick_index(200);
        let miles = 3 + self.pick_index(40);
        let years = 50 + 10 * self.pick_index(60);
        let (s1, s2) = (self.pick_index(4), self.pick_index(4));
        let mut s = vec![
            format!(
                "{place} is {} {} in the {} {}, on the {} bank of the {river} river.",
                a(self.pick(PLACE_ADJ)),
                self.pick(SETTLEMENTS),
                self.pick(REGIONS),
                self.pick(LANDSCAPES),
                self.pick(REGIONS)
            ),
            format!("About {} people live there.", super::with_commas(people)),
            format!(
                "Most of them work as {} or {}, and {place} is best known for its {}.",
                t1.plural, t2.plural, t1.product
            ),
            format!(
                "The market is held every {}, and a fair comes each {}.",
                self.pick(DAYS),
                SEASONS[s1]
            ),
            format!(
                "{place} lies {miles} miles {} of {other}; the road between them crosses the {river} at {third}.",
                self.pick(REGIONS)
            ),
            format!(
                "The oldest building in {place} is the {}, built {} years ago.",
                self.pick(BUILDINGS),
                number_words(years)
            ),
        ];
        if s1 != s2 {
            s.push(format!(
                "The weather is {} in {} and {} in {}.",
                self.pick(WEATHER),
                SEASONS[s1],
                self.pick(WEATHER),
                SEASONS[s2]
            ));
        }
        format!("{place}\n{}\n", s.join(" "))
    }

    /// A few lines of facts, then questions whose answers are in those lines.
    fn questions(&mut self) -> String {
        let p = self.person();
        let trade = self.trade();
        let home = self.place();
        let pet_kind = self.animal();
        let pet = self.pick(PET_NAMES);
        let day = self.pick(DAYS);
        let friend = self.other_person(&[p.name]);
        let n = p.name;
        let facts = [
            format!("{n} is {} from {home}.", a(trade.name)),
            format!("{} has {} named {pet}.", capital(p.he), a(pet_kind.name)),
            format!("On {day}s {n} works at the {} with {}.", trade.workplace, friend.name),
        ];
        let mut qa = vec![
            (format!("Where is {n} from?"), format!("{n} is from {home}.")),
            (format!("What does {n} do?"), format!("{n} is {}.", a(trade.name))),
            (format!("Who is {pet}?"), format!("{pet} is {n}'s {}.", pet_kind.name)),
            (format!("What kind of animal is {pet}?"), format!("{pet} is {}.", a(pet_kind.name))),
            (format!("Who helps {n} on {day}s?"), format!("{} helps {}.", friend.name, p.him)),
            (format!("On which day does {n} work with {}?", friend.name), format!("On {day}s.")),
        ];
        self.rng.shuffle(&mut qa);
        let k = 2 + self.pick_index(3);
        let mut out = facts.join(" ") + "\n";
        for (q, ans) in qa.into_iter().take(k) {
            out.push_str(&format!("Q: {q}\nA: {ans}\n"));
        }
        out
    }

    /// Days, months and small sums, whose answers follow from what comes before them.
    fn reckoning(&mut self) -> String {
        let mut s = vec![];
        for _ in 0..3 + self.pick_index(3) {
            let p = self.person();
            let n = p.name;
            s.push(match self.pick_index(6) {
                0 => {
                    let d = self.pick_index(7);
                    format!(
                        "{n} was born on a {}, so the day after {} birthday was a {}.",
                        DAYS[d],
                        p.his,
                        DAYS[(d + 1) % 7]
                    )
                }
                1 => {
                    let d = self.pick_index(7);
                    format!(
                        "If today is {}, then tomorrow is {} and yesterday was {}.",
                        DAYS[d],
                        DAYS[(d + 1) % 7],
                        DAYS[(d + 6) % 7]
                    )
                }
                2 => {
                    let m = self.pick_index(12);
                    format!(
                        "After {} comes {}, and after {} comes {}.",
                        MONTHS[m],
                        MONTHS[(m + 1) % 12],
                        MONTHS[(m + 1) % 12],
                        MONTHS[(m + 2) % 12]
                    )
                }
                3 => {
                    let friend = self.other_person(&[n]);
                    let (x, y) = (1 + self.pick_index(9), 1 + self.pick_index(9));
                    let f = self.pick(FRUITS);
                    format!(
                        "{n} picked {} {f} and {} picked {}. Together they had {} {f}.",
                        number_words(x),
                        friend.name,
                        number_words(y),
                        number_words(x + y)
                    )
                }
                4 => {
                    let x = 3 + self.pick_index(17);
                    let y = 1 + self.pick_index(x - 1);
                    format!(
                        "{n} had {} coins and spent {} at the market, so {} had {} left.",
                        number_words(x),
                        number_words(y),
                        p.he,
                        number_words(x - y)
                    )
                }
                _ => {
                    let (r, c) = (2 + self.pick_index(8), 2 + self.pick_index(8));
                    format!(
                        "{n} planted {} rows of {} trees, which makes {} trees in all.",
                        number_words(r),
                        number_words(c),
                        number_words(r * c)
                    )
                }
            });
        }
        format!("{}\n", s.join(" "))
    }

    /// A fable about two animals, ending with its moral.
    fn fable(&mut self) -> String {
        let first = self.animal();
        let second = loop {
            let b = self.animal();
            if b.name != first.name {
                break b;
            }
        };
        let (x, y) = (first.name, second.name);
        let adj = self.pick(FABLE_ADJ);
        let landmark = self.pick(LANDMARKS);
        let season = self.pick(SEASONS);
        let mut s = vec![format!(
            "{} {x} lived near the {landmark}. It {}.",
            capital(&a(adj)),
            first.habit
        )];
        if self.chance(0.5) {
            s.push(format!(
                "One {season} day the {x} met {} that was stuck in a hole and could not get out.",
                a(y)
            ));
            s.push(format!("\"Please help me,\" said the {y}. The {x} thought for a moment, then pulled the {y} free."));
            s.push(format!(
                "Many days later a storm came, and the {x} lost its way near the {}.",
                self.pick(LANDMARKS)
            ));
            s.push(format!(
                "The {y} heard it and {}, and showed the {x} the way home.",
                second.sound
            ));
        } else {
            s.push(format!(
                "\"Nobody is quicker than me,\" said the {x} to {} one {season} morning.",
                a(y)
            ));
            s.push(format!("\"Then let us race to the {},\" said the {y}.", self.pick(LANDMARKS)));
            s.push(format!("The {x} ran ahead and then stopped to rest, sure that it had won."));
            s.push(format!(
                "The {y} kept going step by step and arrived first, while the {x} was still asleep."
            ));
        }
        format!(
            "The {} and the {}\n{}\nMoral: {}\n",
            capital(x),
            capital(y),
            s.join(" "),
            self.pick(MORALS)
        )
    }
}

/// Writes a corpus from this file's grammar: pieces (stories, fact sheets, questions and answers,
/// sums and calendars, fables), chosen at random from `seed`, separated by blank lines, until the
/// text holds at least `target_bytes` bytes. `generate(CORPUS_SEED, TARGET_BYTES)` is
/// `data/corpus.txt`.
pub fn generate(seed: u64, target_bytes: usize) -> String {
    let mut g = Gen { rng: Rng::new(seed) };
    let mut out = String::new();
    while out.len() < target_bytes {
        let piece = match g.rng.below(20) {
            0..=6 => g.story(),
            7..=10 => g.town(),
            11..=14 => g.questions(),
            15..=16 => g.reckoning(),
            _ => g.fable(),
        };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&piece);
    }
    out
}
