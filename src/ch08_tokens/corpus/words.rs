//! The grammar's vocabulary: names, places, trades, animals, objects, times and morals, written
//! for this crate, and the small word helpers the sentence frames use (number words, "a"/"an",
//! capitals).

pub(super) const WOMEN: &[&str] = &[
    "Mira", "Anna", "Lena", "Tessa", "Ida", "Rosa", "Nell", "Greta", "Hazel", "Iris", "Maya",
    "Clara", "Elsie", "Fiona", "Kira", "Lucy", "Nora", "Opal", "Petra", "Ruth", "Sara", "Vera",
    "Wanda", "Zoe", "Alma", "Bea", "Dora", "Edith", "Freya", "Juno",
];
pub(super) const MEN: &[&str] = &[
    "Tomas", "Bikram", "Oskar", "Felix", "Hugo", "Ivan", "Jonah", "Karl", "Leo", "Milo", "Nils",
    "Otto", "Pavel", "Quinn", "Rafi", "Sami", "Theo", "Umar", "Viktor", "Wes", "Yusuf", "Abel",
    "Bram", "Cyril", "Dev", "Emil", "Finn", "Gus", "Hal", "Ivo",
];

pub(super) const PLACE_START: &[&str] = &[
    "Elm", "Ash", "Bram", "Cold", "Fern", "Gold", "Hollow", "Iron", "Lark", "Mill", "Oak", "Pine",
    "Raven", "Salt", "Stone", "Thorn", "Willow", "Wren", "Amber", "Brook", "Copper", "Dun", "Moss",
    "Red",
];
pub(super) const PLACE_END: &[&str] = &[
    "ford", "wick", "dale", "mere", "field", "haven", "stead", "bury", "gate", "moor", "ton",
    "holm",
];
pub(super) const RIVERS: &[&str] = &[
    "Tamsel", "Orrin", "Vell", "Lune", "Brisk", "Hadder", "Kell", "Sorrel", "Amble", "Nith",
    "Wend", "Coble",
];
pub(super) const REGIONS: &[&str] = &["north", "south", "east", "west"];
pub(super) const LANDSCAPES: &[&str] = &["valley", "hills", "marshes", "plain", "forest", "coast"];
pub(super) const SETTLEMENTS: &[&str] =
    &["village", "town", "hamlet", "market town", "harbour town"];
pub(super) const PLACE_ADJ: &[&str] =
    &["quiet", "busy", "small", "windy", "sleepy", "green", "old", "muddy", "cheerful", "foggy"];
pub(super) const BUILDINGS: &[&str] = &[
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
pub(super) struct Trade {
    pub(super) name: &'static str,
    pub(super) plural: &'static str,
    pub(super) workplace: &'static str,
    pub(super) routine: &'static str,
    pub(super) product: &'static str,
}

pub(super) const TRADES: &[Trade] = &[
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
pub(super) struct Animal {
    pub(super) name: &'static str,
    pub(super) sound: &'static str,
    pub(super) habit: &'static str,
}

pub(super) const ANIMALS: &[Animal] = &[
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

pub(super) const PET_NAMES: &[&str] = &[
    "Pip", "Biscuit", "Juniper", "Moss", "Pepper", "Sable", "Tuft", "Clover", "Ember", "Ginger",
    "Button", "Rook", "Whisk", "Puddle", "Nutmeg", "Bramble", "Sprout", "Cinder",
];

pub(super) const OBJECTS: &[&str] = &[
    "key", "map", "lantern", "coin", "letter", "feather", "box", "ring", "book", "shell", "bell",
    "compass", "mirror", "flute", "seed", "stone", "spoon", "button",
];
pub(super) const OBJECT_ADJ: &[&str] = &[
    "silver", "golden", "rusty", "tiny", "heavy", "wooden", "blue", "painted", "cracked",
    "shining", "ancient", "old", "green",
];
pub(super) const LANDMARKS: &[&str] = &[
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
pub(super) const DAYS: &[&str] =
    &["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
pub(super) const MONTHS: &[&str] = &[
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
pub(super) const SEASONS: &[&str] = &["spring", "summer", "autumn", "winter"];
pub(super) const TIMES: &[&str] = &["morning", "afternoon", "evening", "night"];
pub(super) const WEATHER: &[&str] =
    &["rainy", "mild", "cold", "warm", "dry", "windy", "snowy", "foggy"];
pub(super) const FEELINGS: &[&str] =
    &["glad", "surprised", "grateful", "happy", "amazed", "relieved"];
pub(super) const GIFTS: &[&str] = &[
    "a basket of apples",
    "a warm scarf",
    "a jar of honey",
    "a small painting",
    "a bag of seeds",
    "a new hat",
    "a loaf of sweet bread",
    "a wooden whistle",
];
pub(super) const EXCLAIMS: &[&str] = &[
    "How strange",
    "What a curious thing",
    "Well, look at that",
    "I have never seen anything like it",
    "Who could have lost this",
    "Now that is a puzzle",
];
pub(super) const FRUITS: &[&str] =
    &["apples", "pears", "plums", "eggs", "carrots", "lemons", "walnuts", "cherries"];
pub(super) const MORALS: &[&str] = &[
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
pub(super) const FABLE_ADJ: &[&str] = &[
    "proud", "kind", "clever", "lazy", "hungry", "young", "old", "careful", "boastful", "patient",
];

pub(super) const ONES: &[&str] = &[
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
pub(super) const TENS: &[&str] =
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
pub(super) fn a(word: &str) -> String {
    let article =
        if word.starts_with(['a', 'e', 'i', 'o', 'A', 'E', 'I', 'O']) { "an" } else { "a" };
    format!("{article} {word}")
}

pub(super) fn capital(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}
