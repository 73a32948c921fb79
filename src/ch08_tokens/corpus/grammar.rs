//! The generator: sentence frames that draw from the word lists and keep a piece's people,
//! places and numbers consistent from one sentence to the next.

use super::words::*;
use crate::rng::Rng;

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
            "The {} turned it over twice and said, \"This {object} belongs to {} of {away}. {} \
                lost it on the road last {}.\"",
            helper.name,
            owner.name,
            capital(owner.he),
            self.pick(SEASONS)
        ));
        let days = 2 + self.pick_index(6);
        second.push(match self.pick_index(3) {
            0 => format!(
                "So {n} and {pet} set out for {away}. The road took {} days.",
                number_words(days)
            ),
            1 => format!(
                "The next {day}, {n} packed some {} and walked to {away} with {pet}.",
                trade.product
            ),
            _ => format!(
                "{n} left the {} in the care of a neighbour and went to {away}, with \
                    {pet} close behind.",
                trade.workplace
            ),
        });
        let feeling = self.pick(FEELINGS);
        let gift = self.pick(GIFTS);
        second.push(format!(
            "When {n} reached {away}, {} found {} and gave back the {object_adj} {object}.",
            h.he, owner.name
        ));
        second.push(format!(
            "{} was so {feeling} that {} gave {n} {gift} and asked about {home} and the {river} \
                river.",
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
            format!("About {} people live there.", crate::snapshot::with_commas(people)),
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
                "{place} lies {miles} miles {} of {other}; the road between them crosses the \
                    {river} at {third}.",
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
            s.push(format!(
                "\"Please help me,\" said the {y}. The {x} thought for a moment, then \
                    pulled the {y} free."
            ));
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

/// Writes a corpus from this grammar: pieces (stories, fact sheets, questions and answers,
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
