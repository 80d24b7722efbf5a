#!/usr/bin/env python3
"""Build the Stepwise demo sample data.

All problems, solutions and reference labels here are original content written
for Stepwise (CC0). Run from anywhere:

    python3 labeling/sample_data/build.py

It writes problems.jsonl, solutions.jsonl and reference_labels.jsonl next to
this file and then validates them (exit status 1 on any inconsistency).

Each sample solution is declared with its steps (the last step without the
"# Answer" block, which is appended here), its final answer, the 0-based
indices of correct-but-unhelpful steps (rated 0) and the 0-based index of the
first wrong step (rated -1), or None when every step is sound.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
GENERATOR = "stepwise-demo-writer"
ANSWER_SEP = "\n\n# Answer\n\n"


@dataclass
class Sample:
    steps: list[str]
    answer: str
    error: int | None = None  # index of the first -1 step
    neutral: tuple[int, ...] = ()  # indices of 0-rated steps

    def full_steps(self) -> list[str]:
        return self.steps[:-1] + [self.steps[-1] + ANSWER_SEP + self.answer]

    def ratings(self) -> list[int]:
        last = len(self.steps) if self.error is None else self.error
        ratings = [0 if i in self.neutral else 1 for i in range(last)]
        if self.error is not None:
            ratings.append(-1)
        return ratings


@dataclass
class Problem:
    subject: str
    level: int
    slug: str
    number: int
    problem: str
    solution: str
    answer: str
    samples: list[Sample] = field(default_factory=list)

    @property
    def unique_id(self) -> str:
        return f"stepwise-demo/{self.slug}/{self.number}.json"


PROBLEMS = [
    # ------------------------------------------------------------------ Algebra
    Problem(
        "Algebra",
        2,
        "algebra",
        1,
        r"Find the sum of all values of $x$ such that $|2x - 5| = 9$.",
        r"The equation $|2x - 5| = 9$ means $2x - 5 = 9$ or $2x - 5 = -9$. In the first case $2x = 14$, so $x = 7$. In the second case $2x = -4$, so $x = -2$. The sum of the solutions is $7 + (-2) = \boxed{5}$.",
        "5",
        [
            Sample(
                [
                    r"I know that an absolute value equals $9$ exactly when the quantity inside is $9$ or $-9$.",
                    r"So I need to solve $2x - 5 = 9$ and $2x - 5 = -9$ separately.",
                    r"For the first equation, I add $5$ to both sides to get $2x = 14$, so $x = 7$.",
                    r"For the second equation, I add $5$ to both sides to get $2x = -4$, so $x = -2$.",
                    r"The sum of the two solutions is $7 + (-2) = 5$.",
                ],
                "5",
            ),
            Sample(
                [
                    r"The absolute value $|2x - 5|$ is $9$ when $2x - 5 = 9$ or when $2x - 5 = -9$.",
                    r"If $2x - 5 = 9$, then $2x = 14$ and $x = 7$.",
                    r"If $2x - 5 = -9$, then $2x = -9 - 5 = -14$, so $x = -7$.",
                    r"So the two solutions are $x = 7$ and $x = -7$.",
                    r"Their sum is $7 + (-7) = 0$.",
                ],
                "0",
                error=2,
            ),
            Sample(
                [
                    r"I want to find all $x$ with $|2x - 5| = 9$ and then add them up.",
                    r"I could try graphing $y = |2x - 5|$ and $y = 9$ to see where they cross, but solving algebraically seems quicker.",
                    r"Removing the absolute value, I get $2x - 5 = \pm 9$, which means $2x = 5 \pm 9$.",
                    r"So $x = \frac{5 \pm 9}{2}$, which gives $x = \frac{14}{2} = 7$ or $x = \frac{-4}{2} = -2$.",
                    r"I notice that the two solutions are symmetric about $x = \frac{5}{2}$, so their sum must be $2 \cdot \frac{5}{2} = 5$.",
                    r"This matches $7 + (-2) = 5$.",
                ],
                "5",
                neutral=(1,),
            ),
        ],
    ),
    Problem(
        "Algebra",
        3,
        "algebra",
        2,
        r"The line passing through the points $(2, -3)$ and $(6, 5)$ intersects the $y$-axis at the point $(0, b)$. What is $b$?",
        r"The slope of the line is $\frac{5 - (-3)}{6 - 2} = \frac{8}{4} = 2$. Using the point-slope form with the point $(2, -3)$, the line is $y + 3 = 2(x - 2)$, or $y = 2x - 7$. Setting $x = 0$ gives $y = -7$, so $b = \boxed{-7}$.",
        "-7",
        [
            Sample(
                [
                    r"To find where the line meets the $y$-axis, I first need its equation.",
                    r"The slope is $m = \frac{5 - (-3)}{6 - 2} = \frac{8}{4} = 2$.",
                    r"So the line has the form $y = 2x + b$, where $b$ is exactly the $y$-intercept I want.",
                    r"Plugging in the point $(6, 5)$, I get $5 = 2(6) + b = 12 + b$.",
                    r"So $b = 5 - 12 = -7$.",
                ],
                "-7",
            ),
            Sample(
                [
                    r"I need the slope of the line first.",
                    r"The slope is $\frac{5 - 3}{6 - 2} = \frac{2}{4} = \frac{1}{2}$.",
                    r"Using the point $(2, -3)$, the line is $y + 3 = \frac{1}{2}(x - 2)$.",
                    r"Expanding, $y = \frac{1}{2}x - 1 - 3 = \frac{1}{2}x - 4$.",
                    r"So the line crosses the $y$-axis at $(0, -4)$, and $b = -4$.",
                ],
                "-4",
                error=1,
            ),
            Sample(
                [
                    r"The slope between $(2, -3)$ and $(6, 5)$ is $\frac{5 - (-3)}{6 - 2} = \frac{8}{4} = 2$.",
                    r"I recall that the $y$-intercept is the point where $x = 0$.",
                    r"In slope-intercept form the line is $y = 2x + b$, and it passes through $(2, -3)$, so $-3 = 2(2) + b$.",
                    r"Solving, $b = 4 - 3 = 1$.",
                    r"So the line meets the $y$-axis at $(0, 1)$, and $b = 1$.",
                ],
                "1",
                error=3,
                neutral=(1,),
            ),
        ],
    ),
    Problem(
        "Algebra",
        4,
        "algebra",
        3,
        r"If $x + \frac{1}{x} = 5$, what is the value of $x^3 + \frac{1}{x^3}$?",
        r"Cubing both sides of $x + \frac{1}{x} = 5$ gives $$x^3 + 3x + \frac{3}{x} + \frac{1}{x^3} = 125,$$ that is, $x^3 + \frac{1}{x^3} + 3\left(x + \frac{1}{x}\right) = 125$. Since $x + \frac{1}{x} = 5$, we get $x^3 + \frac{1}{x^3} = 125 - 15 = \boxed{110}$.",
        "110",
        [
            Sample(
                [
                    r"I notice that cubing $x + \frac{1}{x}$ should produce $x^3 + \frac{1}{x^3}$ together with some cross terms.",
                    r"By the binomial theorem, $\left(x + \frac{1}{x}\right)^3 = x^3 + 3x^2 \cdot \frac{1}{x} + 3x \cdot \frac{1}{x^2} + \frac{1}{x^3} = x^3 + \frac{1}{x^3} + 3\left(x + \frac{1}{x}\right)$.",
                    r"Substituting $x + \frac{1}{x} = 5$, I get $125 = x^3 + \frac{1}{x^3} + 15$.",
                    r"So $x^3 + \frac{1}{x^3} = 125 - 15 = 110$.",
                ],
                "110",
            ),
            Sample(
                [
                    r"I'll first find $x^2 + \frac{1}{x^2}$ by squaring the given equation.",
                    r"Squaring, $x^2 + 2 + \frac{1}{x^2} = 25$, so $x^2 + \frac{1}{x^2} = 23$.",
                    r"Now I can use the sum of cubes factorization: $$x^3 + \frac{1}{x^3} = \left(x + \frac{1}{x}\right)\left(x^2 - 1 + \frac{1}{x^2}\right).$$",
                    r"The second factor is $23 - 1 = 22$.",
                    r"So $x^3 + \frac{1}{x^3} = 5 \cdot 22 = 110$.",
                ],
                "110",
            ),
            Sample(
                [
                    r"I want to relate $x^3 + \frac{1}{x^3}$ to $x + \frac{1}{x}$, so I'll cube the given equation.",
                    r"Cubing gives $\left(x + \frac{1}{x}\right)^3 = x^3 + \frac{1}{x^3} + \left(x + \frac{1}{x}\right)$.",
                    r"So $125 = x^3 + \frac{1}{x^3} + 5$.",
                    r"Therefore $x^3 + \frac{1}{x^3} = 120$.",
                ],
                "120",
                error=1,
            ),
        ],
    ),
    # --------------------------------------------------- Counting & Probability
    Problem(
        "Counting & Probability",
        2,
        "counting_and_probability",
        1,
        r"A committee of $4$ people is to be chosen from a group of $6$ women and $5$ men. In how many ways can the committee be chosen if it must contain exactly $2$ women?",
        r"We choose $2$ of the $6$ women in $\binom{6}{2} = 15$ ways and, independently, $2$ of the $5$ men in $\binom{5}{2} = 10$ ways. So there are $15 \cdot 10 = \boxed{150}$ committees.",
        "150",
        [
            Sample(
                [
                    r"A committee with exactly $2$ women out of $4$ members must also have exactly $2$ men.",
                    r"The number of ways to pick the women is $\binom{6}{2} = \frac{6 \cdot 5}{2} = 15$.",
                    r"The number of ways to pick the men is $\binom{5}{2} = \frac{5 \cdot 4}{2} = 10$.",
                    r"These choices are independent, so I multiply: $15 \cdot 10 = 150$.",
                ],
                "150",
            ),
            Sample(
                [
                    r"I need to choose $2$ women and $2$ men.",
                    r"There are $6$ choices for the first woman and $5$ for the second, so there are $6 \cdot 5 = 30$ ways to choose the women.",
                    r"Similarly, there are $\binom{5}{2} = 10$ ways to choose the men.",
                    r"So the total is $30 \cdot 10 = 300$.",
                ],
                "300",
                error=1,
            ),
            Sample(
                [
                    r"Since the committee has $4$ people and exactly $2$ are women, the other $2$ are men.",
                    r"I can choose the women in $\binom{6}{2} = 15$ ways.",
                    r"I can choose the men in $\binom{5}{2} = 10$ ways.",
                    r"Adding these, there are $15 + 10 = 25$ possible committees.",
                ],
                "25",
                error=3,
            ),
        ],
    ),
    Problem(
        "Counting & Probability",
        3,
        "counting_and_probability",
        2,
        r"Two fair six-sided dice are rolled. What is the probability that the sum of the numbers rolled is a prime number? Express your answer as a common fraction.",
        r"There are $36$ equally likely outcomes. The possible prime sums are $2, 3, 5, 7, 11$, which occur in $1, 2, 4, 6, 2$ ways respectively, for a total of $15$ outcomes. The probability is $\frac{15}{36} = \boxed{\frac{5}{12}}$.",
        r"\frac{5}{12}",
        [
            Sample(
                [
                    r"There are $6 \cdot 6 = 36$ equally likely ordered outcomes.",
                    r"The sum ranges from $2$ to $12$, and the primes in that range are $2, 3, 5, 7,$ and $11$.",
                    r"A sum of $2$ happens $1$ way, a sum of $3$ happens $2$ ways, and a sum of $5$ happens $4$ ways: $(1,4), (2,3), (3,2), (4,1)$.",
                    r"A sum of $7$ happens $6$ ways, and a sum of $11$ happens $2$ ways: $(5,6)$ and $(6,5)$.",
                    r"So the number of favorable outcomes is $1 + 2 + 4 + 6 + 2 = 15$.",
                    r"The probability is $\frac{15}{36} = \frac{5}{12}$.",
                ],
                r"\frac{5}{12}",
            ),
            Sample(
                [
                    r"There are $36$ outcomes in total, and the prime sums possible are $2, 3, 5, 7, 11$.",
                    r"The sum $2$ occurs once and the sum $3$ occurs twice.",
                    r"The sum $5$ occurs $3$ ways: $(1,4), (2,3), (4,1)$.",
                    r"The sum $7$ occurs $6$ ways and the sum $11$ occurs $2$ ways.",
                    r"That's $1 + 2 + 3 + 6 + 2 = 14$ favorable outcomes.",
                    r"So the probability is $\frac{14}{36} = \frac{7}{18}$.",
                ],
                r"\frac{7}{18}",
                error=2,
            ),
            Sample(
                [
                    r"I'll count the outcomes whose sum is prime and divide by $36$.",
                    r"The possible sums are $2$ through $12$, and the primes among them are $2, 3, 5,$ and $7$.",
                    r"These occur in $1, 2, 4,$ and $6$ ways respectively.",
                    r"So there are $1 + 2 + 4 + 6 = 13$ favorable outcomes.",
                    r"The probability is $\frac{13}{36}$.",
                ],
                r"\frac{13}{36}",
                error=1,
            ),
        ],
    ),
    Problem(
        "Counting & Probability",
        4,
        "counting_and_probability",
        3,
        r"How many positive integers less than $1000$ are divisible by neither $6$ nor $10$?",
        r"There are $999$ positive integers less than $1000$. Of these, $\lfloor 999/6 \rfloor = 166$ are divisible by $6$ and $\lfloor 999/10 \rfloor = 99$ are divisible by $10$. An integer is divisible by both $6$ and $10$ exactly when it is divisible by $\operatorname{lcm}(6, 10) = 30$, and there are $\lfloor 999/30 \rfloor = 33$ such integers. By inclusion-exclusion, $166 + 99 - 33 = 232$ integers are divisible by $6$ or $10$, so $999 - 232 = \boxed{767}$ are divisible by neither.",
        "767",
        [
            Sample(
                [
                    r"I'll count the integers from $1$ to $999$ that are divisible by $6$ or $10$ and subtract from $999$.",
                    r"The multiples of $6$ up to $999$ number $\left\lfloor \frac{999}{6} \right\rfloor = 166$.",
                    r"The multiples of $10$ up to $999$ number $\left\lfloor \frac{999}{10} \right\rfloor = 99$.",
                    r"A number divisible by both $6$ and $10$ is divisible by $\operatorname{lcm}(6, 10) = 30$, and there are $\left\lfloor \frac{999}{30} \right\rfloor = 33$ of those.",
                    r"By inclusion-exclusion, $166 + 99 - 33 = 232$ numbers are divisible by $6$ or $10$.",
                    r"So $999 - 232 = 767$ numbers are divisible by neither.",
                ],
                "767",
            ),
            Sample(
                [
                    r"The positive integers less than $1000$ are $1, 2, \ldots, 999$.",
                    r"There are $166$ multiples of $6$ among them, since $6 \cdot 166 = 996$.",
                    r"There are $99$ multiples of $10$, since $10 \cdot 99 = 990$.",
                    r"The numbers divisible by both $6$ and $10$ are the multiples of $6 \cdot 10 = 60$, and there are $\left\lfloor \frac{999}{60} \right\rfloor = 16$ of them.",
                    r"So $166 + 99 - 16 = 249$ numbers are divisible by $6$ or $10$.",
                    r"That leaves $999 - 249 = 750$ numbers divisible by neither.",
                ],
                "750",
                error=3,
            ),
            Sample(
                [
                    r"I want the complement: I'll count the numbers below $1000$ divisible by $6$ or by $10$.",
                    r"I wonder whether it would be easier to sort the numbers by their last digit, but that doesn't seem to help with divisibility by $6$.",
                    r"Let $A$ be the set of multiples of $6$ and $B$ the set of multiples of $10$ in $\{1, \ldots, 999\}$. Then $|A| = 166$ and $|B| = 99$.",
                    r"$A \cap B$ is the set of multiples of $30$, the least common multiple, so $|A \cap B| = 33$ because $30 \cdot 33 = 990$.",
                    r"So $|A \cup B| = 166 + 99 - 33 = 232$.",
                    r"The answer is $999 - 232 = 767$.",
                ],
                "767",
                neutral=(1,),
            ),
        ],
    ),
    # ----------------------------------------------------------------- Geometry
    Problem(
        "Geometry",
        2,
        "geometry",
        1,
        r"A right triangle has legs of length $9$ and $12$. What is the length of the altitude drawn to the hypotenuse? Express your answer as a common fraction.",
        r"The hypotenuse has length $\sqrt{9^2 + 12^2} = \sqrt{225} = 15$. The area of the triangle is $\frac{1}{2} \cdot 9 \cdot 12 = 54$. If $h$ is the altitude to the hypotenuse, the area is also $\frac{1}{2} \cdot 15 \cdot h$, so $\frac{15h}{2} = 54$ and $h = \boxed{\frac{36}{5}}$.",
        r"\frac{36}{5}",
        [
            Sample(
                [
                    r"I can compute the area in two ways: using the legs, and using the hypotenuse with the altitude.",
                    r"The hypotenuse is $\sqrt{9^2 + 12^2} = \sqrt{81 + 144} = \sqrt{225} = 15$.",
                    r"Using the legs as base and height, the area is $\frac{1}{2} \cdot 9 \cdot 12 = 54$.",
                    r"Using the hypotenuse as the base, the area is $\frac{1}{2} \cdot 15 \cdot h$, so $\frac{15}{2} h = 54$.",
                    r"So $h = \frac{2 \cdot 54}{15} = \frac{108}{15} = \frac{36}{5}$.",
                ],
                r"\frac{36}{5}",
            ),
            Sample(
                [
                    r"The hypotenuse is $\sqrt{81 + 144} = 15$.",
                    r"The area of the triangle is $\frac{1}{2} \cdot 9 \cdot 12 = 54$.",
                    r"The altitude to the hypotenuse is the height when the hypotenuse is taken as the base.",
                    r"So the altitude is $\frac{\text{area}}{\text{base}} = \frac{54}{15} = \frac{18}{5}$.",
                ],
                r"\frac{18}{5}",
                error=3,
            ),
            Sample(
                [
                    r"I recall that the altitude to the hypotenuse splits a right triangle into two triangles similar to the original.",
                    r"From the similarity, the altitude $h$ satisfies $\frac{h}{9} = \frac{12}{c}$, where $c$ is the hypotenuse, so $h = \frac{9 \cdot 12}{c}$.",
                    r"By the Pythagorean theorem, $c = \sqrt{9^2 + 12^2} = 15$.",
                    r"So $h = \frac{108}{15} = \frac{36}{5}$.",
                ],
                r"\frac{36}{5}",
            ),
        ],
    ),
    Problem(
        "Geometry",
        3,
        "geometry",
        2,
        r"A circle is inscribed in a square, and the square is inscribed in a larger circle. What is the ratio of the area of the larger circle to the area of the smaller circle?",
        r"Let the square have side length $s$. The inscribed circle has diameter $s$, so its radius is $\frac{s}{2}$. The larger circle has the square's diagonal $s\sqrt{2}$ as its diameter, so its radius is $\frac{s\sqrt{2}}{2}$. The ratio of the areas is the square of the ratio of the radii: $\left(\frac{s\sqrt{2}/2}{s/2}\right)^2 = (\sqrt{2})^2 = \boxed{2}$.",
        "2",
        [
            Sample(
                [
                    r"Let the square have side length $2$, so the numbers come out nicely.",
                    r"The small circle touches all four sides, so its diameter is $2$ and its radius is $1$.",
                    r"The large circle passes through the four vertices, so its diameter is the diagonal of the square, $2\sqrt{2}$, and its radius is $\sqrt{2}$.",
                    r"The areas are $\pi \cdot 1^2 = \pi$ and $\pi (\sqrt{2})^2 = 2\pi$.",
                    r"So the ratio is $\frac{2\pi}{\pi} = 2$.",
                ],
                "2",
            ),
            Sample(
                [
                    r"Let the side of the square be $s$.",
                    r"The smaller circle is inscribed in the square, so its radius is $\frac{s}{2}$.",
                    r"The larger circle is circumscribed about the square, so its radius equals the diagonal of the square, $s\sqrt{2}$.",
                    r"The ratio of the areas is $\frac{\pi (s\sqrt{2})^2}{\pi (s/2)^2} = \frac{2s^2}{s^2/4} = 8$.",
                ],
                "8",
                error=2,
            ),
            Sample(
                [
                    r"Let the square have side $s$. The small circle's radius is half the side, $r = \frac{s}{2}$.",
                    r"The big circle's radius is half the diagonal, $R = \frac{s\sqrt{2}}{2}$.",
                    r"The square's area $s^2$ lies between the areas of the two circles.",
                    r"The ratio of the areas of two circles is the square of the ratio of their radii, and $\frac{R}{r} = \sqrt{2}$.",
                    r"So the ratio of the areas is $(\sqrt{2})^2 = 2$.",
                ],
                "2",
                neutral=(2,),
            ),
        ],
    ),
    Problem(
        "Geometry",
        4,
        "geometry",
        3,
        r"Triangle $ABC$ has side lengths $AB = 5$, $BC = 7$, and $CA = 8$. What is the area of triangle $ABC$? Express your answer in simplest radical form.",
        r"By the Law of Cosines, $$\cos A = \frac{AB^2 + CA^2 - BC^2}{2 \cdot AB \cdot CA} = \frac{25 + 64 - 49}{80} = \frac{1}{2},$$ so $\angle A = 60^\circ$. The area is $\frac{1}{2} \cdot AB \cdot CA \cdot \sin A = \frac{1}{2} \cdot 5 \cdot 8 \cdot \frac{\sqrt{3}}{2} = \boxed{10\sqrt{3}}$.",
        r"10\sqrt{3}",
        [
            Sample(
                [
                    r"I'll use Heron's formula, since I know all three sides.",
                    r"The semiperimeter is $s = \frac{5 + 7 + 8}{2} = 10$.",
                    r"Then $s - 5 = 5$, $s - 7 = 3$, and $s - 8 = 2$.",
                    r"Heron's formula gives an area of $\sqrt{10 \cdot 5 \cdot 3 \cdot 2} = \sqrt{300}$.",
                    r"Since $300 = 100 \cdot 3$, the area is $10\sqrt{3}$.",
                ],
                r"10\sqrt{3}",
            ),
            Sample(
                [
                    r"I notice that the angle at $A$, between the sides of length $5$ and $8$, might be a nice angle.",
                    r"By the Law of Cosines, $7^2 = 5^2 + 8^2 - 2 \cdot 5 \cdot 8 \cos A$, so $49 = 89 - 80 \cos A$.",
                    r"So $\cos A = \frac{40}{80} = \frac{1}{2}$, and $A = 60^\circ$.",
                    r"The area is $\frac{1}{2} \cdot 5 \cdot 8 \cdot \sin 60^\circ = 20 \cdot \frac{\sqrt{3}}{2} = 10\sqrt{3}$.",
                ],
                r"10\sqrt{3}",
            ),
            Sample(
                [
                    r"Heron's formula says the area is $\sqrt{s(s-a)(s-b)(s-c)}$, where $s$ is the semiperimeter.",
                    r"Here $s = \frac{5 + 7 + 8}{2} = 10$.",
                    r"So $s - a = 10 - 5 = 5$, $s - b = 10 - 7 = 4$, and $s - c = 10 - 8 = 2$.",
                    r"The area is $\sqrt{10 \cdot 5 \cdot 4 \cdot 2} = \sqrt{400} = 20$.",
                ],
                "20",
                error=2,
            ),
        ],
    ),
    # --------------------------------------------------- Intermediate Algebra
    Problem(
        "Intermediate Algebra",
        3,
        "intermediate_algebra",
        1,
        r"What is the remainder when $x^5 - 3x^3 + 2x - 7$ is divided by $x - 2$?",
        r"By the Remainder Theorem, the remainder is the value of the polynomial at $x = 2$: $2^5 - 3 \cdot 2^3 + 2 \cdot 2 - 7 = 32 - 24 + 4 - 7 = \boxed{5}$.",
        "5",
        [
            Sample(
                [
                    r"By the Remainder Theorem, the remainder when $p(x)$ is divided by $x - 2$ is $p(2)$.",
                    r"I compute $p(2) = 2^5 - 3 \cdot 2^3 + 2 \cdot 2 - 7$.",
                    r"That is $32 - 24 + 4 - 7$.",
                    r"Adding up, $32 - 24 = 8$ and $8 + 4 - 7 = 5$, so the remainder is $5$.",
                ],
                "5",
            ),
            Sample(
                [
                    r"I'll use the Remainder Theorem, which says the remainder equals the polynomial evaluated at the root of the divisor.",
                    r"The divisor is $x - 2$, so I evaluate at $x = -2$.",
                    r"$(-2)^5 - 3(-2)^3 + 2(-2) - 7 = -32 + 24 - 4 - 7$.",
                    r"That simplifies to $-19$, so the remainder is $-19$.",
                ],
                "-19",
                error=1,
            ),
            Sample(
                [
                    r"I'll use synthetic division with $2$, remembering to include zeros for the missing $x^4$ and $x^2$ terms.",
                    r"The coefficients are $1, 0, -3, 0, 2, -7$.",
                    r"Bringing down the $1$, then $0 + 2 \cdot 1 = 2$, then $-3 + 2 \cdot 2 = 1$, then $0 + 2 \cdot 1 = 2$.",
                    r"Continuing, $2 + 2 \cdot 2 = 6$, and finally $-7 + 2 \cdot 6 = 5$.",
                    r"So the quotient is $x^4 + 2x^3 + x^2 + 2x + 6$ and the remainder is $5$.",
                ],
                "5",
            ),
        ],
    ),
    Problem(
        "Intermediate Algebra",
        4,
        "intermediate_algebra",
        2,
        r"Let $a$, $b$, and $c$ be the roots of $x^3 - 4x^2 + 5x - 7 = 0$. Find $a^2 + b^2 + c^2$.",
        r"By Vieta's formulas, $a + b + c = 4$ and $ab + bc + ca = 5$. Then $$a^2 + b^2 + c^2 = (a + b + c)^2 - 2(ab + bc + ca) = 16 - 10 = \boxed{6}.$$",
        "6",
        [
            Sample(
                [
                    r"I don't want to find the roots themselves, so I'll use Vieta's formulas.",
                    r"For $x^3 - 4x^2 + 5x - 7$, Vieta gives $a + b + c = 4$, $ab + bc + ca = 5$, and $abc = 7$.",
                    r"I know that $(a + b + c)^2 = a^2 + b^2 + c^2 + 2(ab + bc + ca)$.",
                    r"So $a^2 + b^2 + c^2 = 4^2 - 2 \cdot 5 = 16 - 10 = 6$.",
                ],
                "6",
            ),
            Sample(
                [
                    r"Vieta's formulas relate the symmetric sums of the roots to the coefficients.",
                    r"Here $a + b + c = 4$ and $ab + bc + ca = -5$.",
                    r"Since $a^2 + b^2 + c^2 = (a + b + c)^2 - 2(ab + bc + ca)$, I get $16 - 2(-5)$.",
                    r"So $a^2 + b^2 + c^2 = 16 + 10 = 26$.",
                ],
                "26",
                error=1,
            ),
            Sample(
                [
                    r"By Vieta's formulas, $a + b + c = 4$ and $ab + bc + ca = 5$.",
                    r"I need to express $a^2 + b^2 + c^2$ in terms of these.",
                    r"Squaring the sum, $a^2 + b^2 + c^2 = (a + b + c)^2 - (ab + bc + ca)$.",
                    r"So $a^2 + b^2 + c^2 = 16 - 5 = 11$.",
                ],
                "11",
                error=2,
            ),
        ],
    ),
    Problem(
        "Intermediate Algebra",
        5,
        "intermediate_algebra",
        3,
        r"Find the minimum value of $$\frac{x^2 + 7}{\sqrt{x^2 + 3}}$$ over all real numbers $x$.",
        r"Let $t = \sqrt{x^2 + 3}$, so $t \ge \sqrt{3}$ and $x^2 + 7 = t^2 + 4$. The expression equals $$\frac{t^2 + 4}{t} = t + \frac{4}{t}.$$ By AM-GM, $t + \frac{4}{t} \ge 2\sqrt{t \cdot \frac{4}{t}} = 4$, with equality when $t = 2$. Since $2 \ge \sqrt{3}$, this is attained when $x^2 + 3 = 4$, that is, $x = \pm 1$. The minimum value is $\boxed{4}$.",
        "4",
        [
            Sample(
                [
                    r"I notice that the numerator $x^2 + 7$ is $(x^2 + 3) + 4$, so I can split the fraction.",
                    r"So the expression is $\frac{x^2 + 3}{\sqrt{x^2 + 3}} + \frac{4}{\sqrt{x^2 + 3}} = \sqrt{x^2 + 3} + \frac{4}{\sqrt{x^2 + 3}}$.",
                    r"Let $t = \sqrt{x^2 + 3}$. Then $t$ can be any real number with $t \ge \sqrt{3}$, and the expression is $t + \frac{4}{t}$.",
                    r"By AM-GM, $t + \frac{4}{t} \ge 2\sqrt{4} = 4$, with equality exactly when $t = \frac{4}{t}$, that is, $t = 2$.",
                    r"Since $2 > \sqrt{3} \approx 1.73$, the value $t = 2$ is allowed; it happens when $x^2 + 3 = 4$, so $x = \pm 1$.",
                    r"Checking, at $x = 1$ the expression is $\frac{8}{2} = 4$. So the minimum value is $4$.",
                ],
                "4",
            ),
            Sample(
                [
                    r"I'll substitute $t = \sqrt{x^2 + 3}$ to simplify the expression.",
                    r"Then the expression becomes $\frac{t^2 + 7}{t} = t + \frac{7}{t}$.",
                    r"By AM-GM, $t + \frac{7}{t} \ge 2\sqrt{7}$, with equality when $t = \sqrt{7}$.",
                    r"Since $\sqrt{7} \ge \sqrt{3}$, this value of $t$ is attainable.",
                    r"So the minimum value is $2\sqrt{7}$.",
                ],
                r"2\sqrt{7}",
                error=1,
            ),
            Sample(
                [
                    r"Both the numerator and the denominator depend only on $x^2$, so I'll think of the expression as a function of $u = x^2 \ge 0$.",
                    r"As $u$ increases, the numerator $u + 7$ and the denominator $\sqrt{u + 3}$ both increase, but the numerator grows faster, so the expression is increasing in $u$.",
                    r"So the minimum occurs at $u = 0$, that is, at $x = 0$.",
                    r"At $x = 0$ the expression is $\frac{7}{\sqrt{3}} = \frac{7\sqrt{3}}{3}$.",
                ],
                r"\frac{7\sqrt{3}}{3}",
                error=1,
            ),
        ],
    ),
    # ------------------------------------------------------------ Number Theory
    Problem(
        "Number Theory",
        2,
        "number_theory",
        1,
        r"What is the remainder when $7^{100}$ is divided by $5$?",
        r"Since $7 \equiv 2 \pmod{5}$, we have $7^{100} \equiv 2^{100} \pmod{5}$. Now $2^4 = 16 \equiv 1 \pmod{5}$, so $2^{100} = (2^4)^{25} \equiv 1^{25} = 1 \pmod{5}$. The remainder is $\boxed{1}$.",
        "1",
        [
            Sample(
                [
                    r"I notice that $7 \equiv 2 \pmod{5}$, so $7^{100} \equiv 2^{100} \pmod{5}$.",
                    r"The powers of $2$ modulo $5$ are $2, 4, 3, 1$, and then they repeat with period $4$.",
                    r"Since $100$ is a multiple of $4$, $2^{100} = (2^4)^{25} \equiv 1^{25} \equiv 1 \pmod{5}$.",
                    r"So the remainder is $1$.",
                ],
                "1",
            ),
            Sample(
                [
                    r"Modulo $5$, $7$ is congruent to $2$, so I need $2^{100} \bmod 5$.",
                    r"I'll look for a power of $2$ that is congruent to $1$ modulo $5$.",
                    r"I see that $2^3 = 8 \equiv 1 \pmod{5}$.",
                    r"Since $100 = 3 \cdot 33 + 1$, I get $2^{100} = (2^3)^{33} \cdot 2 \equiv 2 \pmod{5}$.",
                    r"So the remainder is $2$.",
                ],
                "2",
                error=2,
            ),
            Sample(
                [
                    r"I want $7^{100} \bmod 5$, which only depends on the last digit of $7^{100}$.",
                    r"The last digits of the powers of $7$ cycle: $7, 9, 3, 1, 7, 9, 3, 1, \ldots$",
                    r"I could also use Fermat's little theorem here, since $5$ is prime.",
                    r"The cycle has length $4$ and $100$ is divisible by $4$, so $7^{100}$ ends in $1$.",
                    r"A number ending in $1$ leaves remainder $1$ when divided by $5$.",
                ],
                "1",
                neutral=(2,),
            ),
        ],
    ),
    Problem(
        "Number Theory",
        3,
        "number_theory",
        2,
        r"How many positive divisors does $720$ have?",
        r"The prime factorization is $720 = 2^4 \cdot 3^2 \cdot 5$. A positive divisor has the form $2^a 3^b 5^c$ with $0 \le a \le 4$, $0 \le b \le 2$, and $0 \le c \le 1$, so there are $(4 + 1)(2 + 1)(1 + 1) = \boxed{30}$ divisors.",
        "30",
        [
            Sample(
                [
                    r"First I'll find the prime factorization of $720$.",
                    r"$720 = 72 \cdot 10 = (2^3 \cdot 3^2)(2 \cdot 5) = 2^4 \cdot 3^2 \cdot 5$.",
                    r"Every divisor is $2^a 3^b 5^c$ with $a \in \{0, 1, 2, 3, 4\}$, $b \in \{0, 1, 2\}$, and $c \in \{0, 1\}$.",
                    r"So the number of divisors is $(4 + 1)(2 + 1)(1 + 1) = 5 \cdot 3 \cdot 2 = 30$.",
                ],
                "30",
            ),
            Sample(
                [
                    r"I'll start by factoring $720$ into primes.",
                    r"$720 = 16 \cdot 45 = 2^4 \cdot 3^2 \cdot 5$.",
                    r"The number of divisors is the product of the exponents, $4 \cdot 2 \cdot 1 = 8$.",
                    r"So $720$ has $8$ positive divisors.",
                ],
                "8",
                error=2,
            ),
            Sample(
                [
                    r"To count divisors I need the prime factorization.",
                    r"$720 = 8 \cdot 90 = 2^3 \cdot 3^2 \cdot 5$.",
                    r"A divisor chooses an exponent of $2$ from $0$ to $3$, an exponent of $3$ from $0$ to $2$, and an exponent of $5$ from $0$ to $1$.",
                    r"So there are $4 \cdot 3 \cdot 2 = 24$ divisors.",
                ],
                "24",
                error=1,
            ),
        ],
    ),
    Problem(
        "Number Theory",
        4,
        "number_theory",
        3,
        r"What is the smallest positive integer $n$ that leaves a remainder of $2$ when divided by $3$, a remainder of $3$ when divided by $5$, and a remainder of $2$ when divided by $7$?",
        r"The conditions $n \equiv 2 \pmod{3}$ and $n \equiv 2 \pmod{7}$ together say $n \equiv 2 \pmod{21}$, since $3$ and $7$ are relatively prime. The positive integers congruent to $2$ modulo $21$ are $2, 23, 44, \ldots$. Of these, $2$ leaves remainder $2$ when divided by $5$, while $23$ leaves remainder $3$. So the smallest such $n$ is $\boxed{23}$.",
        "23",
        [
            Sample(
                [
                    r"I notice that $n$ leaves remainder $2$ both when divided by $3$ and when divided by $7$.",
                    r"So $n - 2$ is divisible by both $3$ and $7$, hence by $21$, which means $n \equiv 2 \pmod{21}$.",
                    r"The candidates are $2, 23, 44, 65, \ldots$, and I need the first one that is $3$ more than a multiple of $5$.",
                    r"$2$ leaves remainder $2$ when divided by $5$, so it fails.",
                    r"$23 = 4 \cdot 5 + 3$ leaves remainder $3$, so it works.",
                    r"So the smallest such $n$ is $23$.",
                ],
                "23",
            ),
            Sample(
                [
                    r"I'll list the numbers that leave remainder $3$ when divided by $5$: $3, 8, 13, 18, 23, 28, \ldots$",
                    r"Of these, the ones that leave remainder $2$ when divided by $3$ are $8, 23, 38, \ldots$, going up by $15$.",
                    r"Now I check remainders modulo $7$: $8 = 7 + 1$ leaves remainder $1$, so it fails.",
                    r"$23 = 3 \cdot 7 + 2$ leaves remainder $2$, so it works.",
                    r"Since I checked the candidates in increasing order, the smallest is $23$.",
                ],
                "23",
            ),
            Sample(
                [
                    r"Since $n \equiv 2 \pmod{3}$ and $n \equiv 2 \pmod{7}$, and $3$ and $7$ are relatively prime, $n \equiv 2 \pmod{21}$.",
                    r"So $n$ is one of $2, 23, 44, 65, 86, 107, 128, \ldots$",
                    r"I need $n \equiv 3 \pmod{5}$. The number $2$ leaves remainder $2$, so it doesn't work.",
                    r"The number $23$ leaves remainder $2$ when divided by $5$, so it doesn't work either.",
                    r"Next, $44 = 8 \cdot 5 + 4$ leaves remainder $4$.",
                    r"Then $65$ is a multiple of $5$, so it leaves remainder $0$.",
                    r"Then $86 = 17 \cdot 5 + 1$ leaves remainder $1$.",
                    r"Then $107 = 21 \cdot 5 + 2$ leaves remainder $2$.",
                    r"Finally $128 = 25 \cdot 5 + 3$ leaves remainder $3$, so the smallest such $n$ is $128$.",
                ],
                "128",
                error=3,
            ),
        ],
    ),
    # --------------------------------------------------------------- Prealgebra
    Problem(
        "Prealgebra",
        1,
        "prealgebra",
        1,
        r"What is $\frac{3}{4}$ of $\frac{2}{3}$ of $48$?",
        r"First, $\frac{2}{3}$ of $48$ is $\frac{2}{3} \cdot 48 = 32$. Then $\frac{3}{4}$ of $32$ is $\frac{3}{4} \cdot 32 = \boxed{24}$.",
        "24",
        [
            Sample(
                [
                    r"I'll work from the inside out, first finding $\frac{2}{3}$ of $48$.",
                    r"$48 \div 3 = 16$, so $\frac{2}{3}$ of $48$ is $2 \cdot 16 = 32$.",
                    r"Next, $32 \div 4 = 8$, so $\frac{3}{4}$ of $32$ is $3 \cdot 8 = 24$.",
                    r"So the answer is $24$.",
                ],
                "24",
            ),
            Sample(
                [
                    r"First I need $\frac{2}{3}$ of $48$.",
                    r"$48 \div 3 = 18$, so $\frac{2}{3}$ of $48$ is $36$.",
                    r"Then $\frac{3}{4}$ of $36$ is $3 \cdot 9 = 27$.",
                    r"So the answer is $27$.",
                ],
                "27",
                error=1,
            ),
            Sample(
                [
                    r'"Of" means multiplication, so I want $\frac{3}{4} \cdot \frac{2}{3} \cdot 48$.',
                    r"Multiplying the fractions first, $\frac{3}{4} \cdot \frac{2}{3} = \frac{6}{12} = \frac{1}{2}$.",
                    r"So the result is $\frac{1}{2} \cdot 48 = 24$.",
                    r"I can double-check: $\frac{2}{3}$ of $48$ is $32$, and $\frac{3}{4}$ of $32$ is $24$.",
                ],
                "24",
            ),
        ],
    ),
    Problem(
        "Prealgebra",
        3,
        "prealgebra",
        2,
        r"The price of a jacket is increased by $20\%$, and then the new price is decreased by $25\%$. The final price is $\$54$. What was the original price of the jacket, in dollars?",
        r"If the original price is $p$ dollars, the final price is $p \cdot 1.2 \cdot 0.75 = 0.9p$. Setting $0.9p = 54$ gives $p = \boxed{60}$.",
        "60",
        [
            Sample(
                [
                    r"Let the original price be $p$ dollars.",
                    r"After a $20\%$ increase, the price is $1.2p$.",
                    r"After a $25\%$ decrease, the price is $0.75 \cdot 1.2p = 0.9p$.",
                    r"So $0.9p = 54$, which gives $p = \frac{54}{0.9} = 60$.",
                ],
                "60",
            ),
            Sample(
                [
                    r"I'll work backwards from the final price of $\$54$.",
                    r"To undo the $25\%$ decrease, I increase $\$54$ by $25\%$: $54 \cdot 1.25 = 67.5$.",
                    r"To undo the $20\%$ increase, I decrease $\$67.50$ by $20\%$: $67.5 \cdot 0.8 = 54$.",
                    r"So the original price was $\$54$.",
                ],
                "54",
                error=1,
            ),
            Sample(
                [
                    r"Let $p$ be the original price.",
                    r"Prices like this are usually whole numbers of dollars, so I expect a whole-number answer.",
                    r"The increase multiplies the price by $\frac{6}{5}$ and the decrease multiplies it by $\frac{3}{4}$.",
                    r"So the final price is $\frac{6}{5} \cdot \frac{3}{4} p = \frac{18}{20} p = \frac{9}{10} p$.",
                    r"Setting $\frac{9}{10} p = 54$, I get $p = 54 \cdot \frac{10}{9} = 60$.",
                ],
                "60",
                neutral=(1,),
            ),
        ],
    ),
    Problem(
        "Prealgebra",
        2,
        "prealgebra",
        3,
        r"The mean of five numbers is $12$. When one of the numbers is removed, the mean of the remaining four numbers is $10$. What number was removed?",
        r"The five numbers have sum $5 \cdot 12 = 60$, and the remaining four have sum $4 \cdot 10 = 40$. So the removed number is $60 - 40 = \boxed{20}$.",
        "20",
        [
            Sample(
                [
                    r"The sum of the five numbers is $5 \cdot 12 = 60$.",
                    r"The sum of the remaining four numbers is $4 \cdot 10 = 40$.",
                    r"The removed number is the difference of the two sums.",
                    r"So it is $60 - 40 = 20$.",
                ],
                "20",
            ),
            Sample(
                [
                    r"I'll use the fact that the sum of a list of numbers is the mean times how many numbers there are.",
                    r"The five numbers add up to $5 \cdot 12 = 50$.",
                    r"The four remaining numbers add up to $4 \cdot 10 = 40$.",
                    r"So the removed number is $50 - 40 = 10$.",
                ],
                "10",
                error=1,
            ),
            Sample(
                [
                    r"I'll think about how removing one number changes the mean.",
                    r"The mean drops from $12$ to $10$, which is a drop of $2$.",
                    r"The drop of $2$ is spread over the five original numbers, so the removed number must be $5 \cdot 2 = 10$.",
                    r"So the number that was removed is $10$.",
                ],
                "10",
                error=2,
            ),
        ],
    ),
    # ------------------------------------------------------------- Precalculus
    Problem(
        "Precalculus",
        2,
        "precalculus",
        1,
        r"Find the angle, in degrees, between the vectors $\begin{pmatrix} 1 \\ 1 \\ 0 \end{pmatrix}$ and $\begin{pmatrix} 1 \\ 0 \\ 1 \end{pmatrix}$.",
        r"If $\theta$ is the angle between the vectors $\mathbf{u}$ and $\mathbf{v}$, then $$\cos \theta = \frac{\mathbf{u} \cdot \mathbf{v}}{\|\mathbf{u}\| \, \|\mathbf{v}\|} = \frac{1 \cdot 1 + 1 \cdot 0 + 0 \cdot 1}{\sqrt{2} \cdot \sqrt{2}} = \frac{1}{2},$$ so $\theta = \boxed{60^\circ}$.",
        r"60^\circ",
        [
            Sample(
                [
                    r"The angle $\theta$ between $\mathbf{u}$ and $\mathbf{v}$ satisfies $\cos \theta = \frac{\mathbf{u} \cdot \mathbf{v}}{\|\mathbf{u}\| \, \|\mathbf{v}\|}$.",
                    r"The dot product is $1 \cdot 1 + 1 \cdot 0 + 0 \cdot 1 = 1$.",
                    r"Each vector has length $\sqrt{1^2 + 1^2 + 0^2} = \sqrt{2}$, so the product of the lengths is $2$.",
                    r"So $\cos \theta = \frac{1}{2}$, and $\theta = 60^\circ$.",
                ],
                r"60^\circ",
            ),
            Sample(
                [
                    r"I'll use $\cos \theta = \frac{\mathbf{u} \cdot \mathbf{v}}{\|\mathbf{u}\| \, \|\mathbf{v}\|}$.",
                    r"The dot product is $1 \cdot 1 + 1 \cdot 1 + 0 \cdot 0 = 2$.",
                    r"The lengths are both $\sqrt{2}$, so their product is $2$.",
                    r"So $\cos \theta = \frac{2}{2} = 1$, and $\theta = 0^\circ$.",
                ],
                r"0^\circ",
                error=1,
            ),
            Sample(
                [
                    r"The dot product of the two vectors is $(1)(1) + (1)(0) + (0)(1) = 1$.",
                    r"The magnitudes are $\sqrt{1 + 1 + 0} = \sqrt{2}$ and $\sqrt{1 + 0 + 1} = \sqrt{2}$.",
                    r"So $\cos \theta = \frac{1}{\sqrt{2} \cdot \sqrt{2}} = \frac{1}{2}$.",
                    r"The angle whose cosine is $\frac{1}{2}$ is $30^\circ$, so $\theta = 30^\circ$.",
                ],
                r"30^\circ",
                error=3,
            ),
        ],
    ),
    Problem(
        "Precalculus",
        3,
        "precalculus",
        2,
        r"Compute $$\begin{vmatrix} 2 & 1 & 3 \\ 0 & -1 & 4 \\ 1 & 2 & 0 \end{vmatrix}.$$",
        r"Expanding along the first row, $$\begin{aligned} \begin{vmatrix} 2 & 1 & 3 \\ 0 & -1 & 4 \\ 1 & 2 & 0 \end{vmatrix} &= 2 \begin{vmatrix} -1 & 4 \\ 2 & 0 \end{vmatrix} - 1 \begin{vmatrix} 0 & 4 \\ 1 & 0 \end{vmatrix} + 3 \begin{vmatrix} 0 & -1 \\ 1 & 2 \end{vmatrix} \\ &= 2(0 - 8) - (0 - 4) + 3(0 + 1) \\ &= -16 + 4 + 3 = \boxed{-9}. \end{aligned}$$",
        "-9",
        [
            Sample(
                [
                    r"I'll expand the determinant $D$ along the first row.",
                    r"$$D = 2 \begin{vmatrix} -1 & 4 \\ 2 & 0 \end{vmatrix} - 1 \begin{vmatrix} 0 & 4 \\ 1 & 0 \end{vmatrix} + 3 \begin{vmatrix} 0 & -1 \\ 1 & 2 \end{vmatrix}.$$",
                    r"The $2 \times 2$ determinants are $(-1)(0) - (4)(2) = -8$, $(0)(0) - (4)(1) = -4$, and $(0)(2) - (-1)(1) = 1$.",
                    r"So $D = 2(-8) - 1(-4) + 3(1) = -16 + 4 + 3 = -9$.",
                ],
                "-9",
            ),
            Sample(
                [
                    r"I'll use cofactor expansion along the first row.",
                    r"That gives $2 \begin{vmatrix} -1 & 4 \\ 2 & 0 \end{vmatrix} + 1 \begin{vmatrix} 0 & 4 \\ 1 & 0 \end{vmatrix} + 3 \begin{vmatrix} 0 & -1 \\ 1 & 2 \end{vmatrix}$.",
                    r"The three $2 \times 2$ determinants are $-8$, $-4$, and $1$.",
                    r"So the determinant is $2(-8) + 1(-4) + 3(1) = -16 - 4 + 3 = -17$.",
                ],
                "-17",
                error=1,
            ),
            Sample(
                [
                    r"The first column has a zero in it, so expanding along the first column saves some work.",
                    r"The signs for the first column are $+, -, +$, and the middle entry is $0$, so $$D = 2 \begin{vmatrix} -1 & 4 \\ 2 & 0 \end{vmatrix} + 1 \begin{vmatrix} 1 & 3 \\ -1 & 4 \end{vmatrix}.$$",
                    r"$$\begin{aligned} \begin{vmatrix} -1 & 4 \\ 2 & 0 \end{vmatrix} &= (-1)(0) - (4)(2) = -8, \\ \begin{vmatrix} 1 & 3 \\ -1 & 4 \end{vmatrix} &= (1)(4) - (3)(-1) = 7. \end{aligned}$$",
                    r"So $D = 2(-8) + 7 = -9$.",
                ],
                "-9",
            ),
        ],
    ),
    Problem(
        "Precalculus",
        5,
        "precalculus",
        3,
        r"How many values of $x$ with $0 \le x < 2\pi$ satisfy $\sin 2x = \cos x$?",
        r"Using $\sin 2x = 2 \sin x \cos x$, the equation becomes $2 \sin x \cos x - \cos x = 0$, or $\cos x \, (2 \sin x - 1) = 0$. If $\cos x = 0$, then $x = \frac{\pi}{2}$ or $x = \frac{3\pi}{2}$. If $\sin x = \frac{1}{2}$, then $x = \frac{\pi}{6}$ or $x = \frac{5\pi}{6}$. These four values are distinct, so there are $\boxed{4}$ solutions.",
        "4",
        [
            Sample(
                [
                    r"I'll use the double angle identity $\sin 2x = 2 \sin x \cos x$.",
                    r"So the equation is $2 \sin x \cos x = \cos x$, or $\cos x \, (2 \sin x - 1) = 0$.",
                    r"Either $\cos x = 0$, which gives $x = \frac{\pi}{2}$ or $x = \frac{3\pi}{2}$ in $[0, 2\pi)$.",
                    r"Or $\sin x = \frac{1}{2}$, which gives $x = \frac{\pi}{6}$ or $x = \frac{5\pi}{6}$.",
                    r"None of these four values coincide, so there are $4$ solutions.",
                ],
                "4",
            ),
            Sample(
                [
                    r"Using $\sin 2x = 2 \sin x \cos x$, the equation becomes $2 \sin x \cos x = \cos x$.",
                    r"I want to isolate $\sin x$.",
                    r"Dividing both sides by $\cos x$, I get $2 \sin x = 1$, so $\sin x = \frac{1}{2}$.",
                    r"In $[0, 2\pi)$, $\sin x = \frac{1}{2}$ when $x = \frac{\pi}{6}$ or $x = \frac{5\pi}{6}$.",
                    r"So there are $2$ solutions.",
                ],
                "2",
                error=2,
                neutral=(1,),
            ),
            Sample(
                [
                    r"I'll rewrite $\sin 2x$ as $2 \sin x \cos x$, so the equation is $2 \sin x \cos x - \cos x = 0$.",
                    r"I could also write $\cos x = \sin\left(\frac{\pi}{2} - x\right)$ and compare angles, but factoring looks simpler.",
                    r"Factoring, $\cos x \, (2 \sin x - 1) = 0$.",
                    r"The factor $\cos x$ is zero at $x = \frac{\pi}{2}$ and $x = \frac{3\pi}{2}$.",
                    r"The factor $2 \sin x - 1$ is zero when $\sin x = \frac{1}{2}$, at $x = \frac{\pi}{6}$ and $x = \frac{5\pi}{6}$.",
                    r"That's $4$ distinct solutions in total.",
                ],
                "4",
                neutral=(1,),
            ),
        ],
    ),
]


# ------------------------------------------------------------- candidate pool
# More generator samples for the same problems, never labeled: the demo's candidate pool, which
# an active-learning generation scores and selects from. Keyed by the problem's unique_id;
# `error` marks the first wrong step (for whoever wants to simulate labeling them), and every
# wrong final answer has one.
POOL: dict[str, list[Sample]] = {
    "stepwise-demo/algebra/1.json": [
        Sample(
            [
                r"The two cases are $2x - 5 = 9$ and $2x - 5 = -9$.",
                r"From $2x - 5 = 9$ I get $2x = 14$, so $x = 7$.",
                r"From $2x - 5 = -9$ I get $2x = -4$, so $x = -2$.",
                r"Both values check out: $|14 - 5| = 9$ and $|-4 - 5| = 9$.",
                r"The sum is $7 + (-2) = 5$.",
            ],
            "5",
        ),
        Sample(
            [
                r"I split the absolute value equation into the cases $2x - 5 = 9$ and $2x - 5 = -9$.",
                r"The first case gives $x = 7$.",
                r"The second case gives $2x = -4$, so $x = -2$.",
                r"Adding the solutions, $7 + 2 = 9$.",
            ],
            "9",
            error=3,
        ),
        Sample(
            [
                r"I'll square both sides to get rid of the absolute value.",
                r"Squaring, $4x^2 - 10x + 25 = 81$.",
                r"So $4x^2 - 10x - 56 = 0$.",
                r"By Vieta's formulas, the sum of the roots is $\frac{10}{4} = \frac{5}{2}$.",
            ],
            r"\frac{5}{2}",
            error=1,
        ),
    ],
    "stepwise-demo/algebra/2.json": [
        Sample(
            [
                r"The slope of the line is $\frac{5 + 3}{6 - 2} = 2$.",
                r"Going from $x = 2$ to $x = 0$ moves $2$ units to the left.",
                r"With slope $2$, $y$ drops by $2 \cdot 2 = 4$ over those $2$ units.",
                r"So at $x = 0$, $y = -3 - 4 = -7$, and $b = -7$.",
            ],
            "-7",
        ),
        Sample(
            [
                r"I'll find the equation of the line and set $x = 0$.",
                r"The slope is $\frac{5 - (-3)}{6 - 2} = \frac{8}{4} = 2$.",
                r"Through the point $(6, 5)$, the line is $y - 5 = 2(x - 6)$.",
                r"Expanding, $y = 2x - 6 + 5 = 2x - 1$.",
                r"So $b = -1$.",
            ],
            "-1",
            error=3,
        ),
        Sample(
            [
                r"The point $(0, b)$ is on the same line, so the slope from $(0, b)$ to $(2, -3)$ equals the slope of the line.",
                r"The slope of the line is $\frac{5 - (-3)}{6 - 2} = \frac{8}{4} = 2$.",
                r"The slope from $(0, b)$ to $(2, -3)$ is $\frac{-3 - b}{2 - 0} = \frac{-3 - b}{2}$.",
                r"Setting $\frac{-3 - b}{2} = 2$ gives $-3 - b = 4$, so $b = -7$.",
            ],
            "-7",
        ),
    ],
    "stepwise-demo/algebra/3.json": [
        Sample(
            [
                r"I'll build up from lower powers.",
                r"Squaring the given equation gives $x^2 + \frac{1}{x^2} = 25$.",
                r"Now $\left(x^2 + \frac{1}{x^2}\right)\left(x + \frac{1}{x}\right) = x^3 + \frac{1}{x^3} + x + \frac{1}{x}$.",
                r"So $25 \cdot 5 = x^3 + \frac{1}{x^3} + 5$, which gives $x^3 + \frac{1}{x^3} = 120$.",
            ],
            "120",
            error=1,
        ),
        Sample(
            [
                r"Squaring, $x^2 + 2 + \frac{1}{x^2} = 25$, so $x^2 + \frac{1}{x^2} = 23$.",
                r"Multiplying, $\left(x^2 + \frac{1}{x^2}\right)\left(x + \frac{1}{x}\right) = x^3 + x + \frac{1}{x} + \frac{1}{x^3}$.",
                r"The left side is $23 \cdot 5 = 115$, and $x + \frac{1}{x} = 5$.",
                r"So $x^3 + \frac{1}{x^3} = 115 - 5 = 110$.",
            ],
            "110",
        ),
        Sample(
            [
                r"I'll cube both sides of the equation.",
                r"Cubing gives $x^3 + 3x + \frac{3}{x} + \frac{1}{x^3} = 125$.",
                r"The middle terms are $3\left(x + \frac{1}{x}\right) = 15$.",
                r"So $x^3 + \frac{1}{x^3} = 125 + 15 = 140$.",
            ],
            "140",
            error=3,
        ),
    ],
    "stepwise-demo/counting_and_probability/1.json": [
        Sample(
            [
                r"Exactly $2$ women means the other $2$ members are men.",
                r"The women can be chosen in $\binom{6}{2} = 15$ ways.",
                r"The men can be chosen in $\binom{5}{2} = 10$ ways.",
                r"By the multiplication principle there are $15 \cdot 10 = 150$ committees.",
            ],
            "150",
        ),
        Sample(
            [
                r"I'll choose the women first and then fill the rest of the committee.",
                r"After choosing $2$ women in $\binom{6}{2} = 15$ ways, I fill the remaining $2$ seats from the other $9$ people in $\binom{9}{2} = 36$ ways.",
                r"Each choice of women combines with each choice for the other seats.",
                r"So there are $15 \cdot 36 = 540$ committees.",
            ],
            "540",
            error=1,
        ),
        Sample(
            [
                r"The women can be chosen in $\binom{6}{2}$ ways and the men in $\binom{5}{2}$ ways.",
                r"$\binom{6}{2} = \frac{6 \cdot 5}{2} = 15$.",
                r"$\binom{5}{2} = \frac{5 \cdot 4}{2} = 20$.",
                r"So there are $15 \cdot 20 = 300$ committees.",
            ],
            "300",
            error=2,
        ),
    ],
    "stepwise-demo/counting_and_probability/2.json": [
        Sample(
            [
                r"Out of $36$ ordered rolls, I count those with a prime sum.",
                r"The prime sums possible are $2, 3, 5, 7,$ and $11$.",
                r"They occur in $1, 2, 4, 6,$ and $2$ ways respectively.",
                r"That's $15$ outcomes, so the probability is $\frac{15}{36} = \frac{5}{12}$.",
            ],
            r"\frac{5}{12}",
        ),
        Sample(
            [
                r"I'll count the possible rolls and the favorable ones.",
                r"Since the order of the dice doesn't matter, there are $21$ possible rolls: $15$ with two different numbers and $6$ doubles.",
                r"The rolls with a prime sum are $\{1,1\}, \{1,2\}, \{1,4\}, \{2,3\}, \{1,6\}, \{2,5\}, \{3,4\}, \{5,6\}$, which is $8$ rolls.",
                r"So the probability is $\frac{8}{21}$.",
            ],
            r"\frac{8}{21}",
            error=1,
        ),
        Sample(
            [
                r"There are $36$ equally likely outcomes.",
                r"The prime sums are $2, 3, 5, 7,$ and $11$.",
                r"Sums of $2, 3, 5,$ and $7$ occur in $1, 2, 4,$ and $6$ ways.",
                r"A sum of $11$ occurs only $1$ way, with $(5, 6)$.",
                r"So there are $14$ favorable outcomes, and the probability is $\frac{14}{36} = \frac{7}{18}$.",
            ],
            r"\frac{7}{18}",
            error=3,
        ),
    ],
    "stepwise-demo/counting_and_probability/3.json": [
        Sample(
            [
                r"Among $1, \ldots, 999$ there are $166$ multiples of $6$, since $6 \cdot 166 = 996$.",
                r"There are $99$ multiples of $10$, since $10 \cdot 99 = 990$.",
                r"Multiples of both are the multiples of $30$, and $30 \cdot 33 = 990$ gives $33$ of them.",
                r"So $166 + 99 - 33 = 232$ are multiples of $6$ or $10$, and $999 - 232 = 767$ are multiples of neither.",
            ],
            "767",
        ),
        Sample(
            [
                r"I'll subtract the multiples of $6$ and of $10$ from the $999$ numbers.",
                r"There are $\left\lfloor \frac{999}{6} \right\rfloor = 166$ multiples of $6$.",
                r"There are $\left\lfloor \frac{999}{10} \right\rfloor = 99$ multiples of $10$.",
                r"So $999 - 166 - 99 = 734$ numbers are divisible by neither.",
            ],
            "734",
            error=3,
        ),
        Sample(
            [
                r"I'll use inclusion-exclusion on the numbers $1$ to $999$.",
                r"There are $167$ multiples of $6$ below $1000$.",
                r"There are $99$ multiples of $10$ below $1000$.",
                r"Numbers divisible by both are multiples of $30$, and there are $33$ of them.",
                r"So $167 + 99 - 33 = 233$ are divisible by $6$ or $10$, leaving $999 - 233 = 766$.",
            ],
            "766",
            error=1,
        ),
    ],
    "stepwise-demo/geometry/1.json": [
        Sample(
            [
                r"The hypotenuse is $\sqrt{81 + 144} = 15$.",
                r"The area is $\frac{1}{2} \cdot 9 \cdot 12 = 54$.",
                r"The altitude $h$ to the hypotenuse satisfies $15h = 54$.",
                r"So $h = \frac{54}{15} = \frac{18}{5}$.",
            ],
            r"\frac{18}{5}",
            error=2,
        ),
        Sample(
            [
                r"The hypotenuse is $\sqrt{9^2 + 12^2} = 15$.",
                r"Let $h$ be the altitude to the hypotenuse; it cuts off a right triangle whose hypotenuse is the leg of length $9$.",
                r"Both $\frac{h}{9}$ and $\frac{12}{15}$ are the sine of the angle between the leg of length $9$ and the hypotenuse, so $\frac{h}{9} = \frac{12}{15}$.",
                r"Then $h = \frac{9 \cdot 12}{15} = \frac{108}{15} = \frac{36}{5}$.",
            ],
            r"\frac{36}{5}",
        ),
        Sample(
            [
                r"I'll find the hypotenuse first: $\sqrt{9^2 + 12^2} = \sqrt{225} = 15$.",
                r"The product of the legs and the product of the hypotenuse and its altitude are both twice the area.",
                r"So $15h = 9 \cdot 12 = 108$.",
                r"Therefore $h = \frac{108}{15} = \frac{36}{5}$.",
            ],
            r"\frac{36}{5}",
        ),
    ],
    "stepwise-demo/geometry/2.json": [
        Sample(
            [
                r"Let the small circle have radius $r$; then the square has side $2r$.",
                r"The square's diagonal is $2r\sqrt{2}$, and it is a diameter of the large circle.",
                r"So the large circle has radius $r\sqrt{2}$.",
                r"The ratio of the areas is $\frac{\pi (r\sqrt{2})^2}{\pi r^2} = 2$.",
            ],
            "2",
        ),
        Sample(
            [
                r"Let the square have side $2$.",
                r"The small circle has radius $1$.",
                r"The large circle has radius equal to the diagonal of the square, $2\sqrt{2}$.",
                r"So the ratio of the areas is $\frac{(2\sqrt{2})^2}{1^2} = 8$.",
            ],
            "8",
            error=2,
        ),
        Sample(
            [
                r"Let the square have side $s$; the small circle's radius is $\frac{s}{2}$.",
                r"The large circle's radius is half the diagonal, $\frac{s\sqrt{2}}{2}$.",
                r"So the ratio of the radii is $\sqrt{2}$.",
                r"Areas scale like the radius, so the ratio of the areas is $\sqrt{2}$.",
            ],
            r"\sqrt{2}",
            error=3,
        ),
    ],
    "stepwise-demo/geometry/3.json": [
        Sample(
            [
                r"I'll use Heron's formula.",
                r"The semiperimeter is $s = \frac{5 + 7 + 8}{2} = 10$.",
                r"The area is $\sqrt{10(10 - 5)(10 - 7)(10 - 8)} = \sqrt{10 \cdot 5 \cdot 3 \cdot 2}$.",
                r"That is $\sqrt{300} = 10\sqrt{3}$.",
            ],
            r"10\sqrt{3}",
        ),
        Sample(
            [
                r"I'll use Heron's formula.",
                r"The semiperimeter is $s = 5 + 7 + 8 = 20$.",
                r"So the area is $\sqrt{20 \cdot 15 \cdot 13 \cdot 12} = \sqrt{46800}$.",
                r"Since $46800 = 3600 \cdot 13$, the area is $60\sqrt{13}$.",
            ],
            r"60\sqrt{13}",
            error=1,
        ),
        Sample(
            [
                r"I'll find an angle with the Law of Cosines.",
                r"$\cos A = \frac{5^2 + 8^2 - 7^2}{2 \cdot 5 \cdot 8} = \frac{40}{80} = \frac{1}{2}$.",
                r"The area is $\frac{1}{2} \cdot 5 \cdot 8 \cdot \sin A$, and $\sin A = \frac{1}{2}$.",
                r"So the area is $20 \cdot \frac{1}{2} = 10$.",
            ],
            "10",
            error=2,
        ),
    ],
    "stepwise-demo/intermediate_algebra/1.json": [
        Sample(
            [
                r"By the Remainder Theorem, I evaluate the polynomial at $x = 2$.",
                r"$2^5 = 32$ and $3 \cdot 2^3 = 24$.",
                r"$2 \cdot 2 = 4$.",
                r"So the remainder is $32 - 24 + 4 - 7 = 5$.",
            ],
            "5",
        ),
        Sample(
            [
                r"By the Remainder Theorem, the remainder is $p(2)$.",
                r"$p(2) = 2^5 - 3 \cdot 2^3 + 2 \cdot 2 - 7 = 32 - 18 + 4 - 7$.",
                r"That is $11$.",
                r"So the remainder is $11$.",
            ],
            "11",
            error=1,
        ),
        Sample(
            [
                r"The remainder when dividing by $x - 2$ is the value of the polynomial at $x = -2$.",
                r"$(-2)^5 = -32$ and $-3(-2)^3 = 24$.",
                r"$2(-2) = -4$.",
                r"So the remainder is $-32 + 24 - 4 - 7 = -19$.",
            ],
            "-19",
            error=0,
        ),
    ],
    "stepwise-demo/intermediate_algebra/2.json": [
        Sample(
            [
                r"By Vieta's formulas, $a + b + c = 4$ and $ab + bc + ca = 5$.",
                r"Since $(a + b + c)^2 = a^2 + b^2 + c^2 + 2(ab + bc + ca)$,",
                r"I get $16 = a^2 + b^2 + c^2 + 10$,",
                r"so $a^2 + b^2 + c^2 = 6$.",
            ],
            "6",
        ),
        Sample(
            [
                r"The cubic is monic, so Vieta's formulas apply directly.",
                r"They give $a + b + c = 4$ and $ab + bc + ca = -5$.",
                r"Then $a^2 + b^2 + c^2 = (a + b + c)^2 - 2(ab + bc + ca) = 16 + 10$.",
                r"So $a^2 + b^2 + c^2 = 26$.",
            ],
            "26",
            error=1,
        ),
        Sample(
            [
                r"I'll use Vieta's formulas.",
                r"They give $a + b + c = 4$ and $ab + bc + ca = 5$.",
                r"Then $a^2 + b^2 + c^2 = (a + b + c)^2 - (ab + bc + ca)$.",
                r"So $a^2 + b^2 + c^2 = 16 - 5 = 11$.",
            ],
            "11",
            error=2,
        ),
    ],
    "stepwise-demo/intermediate_algebra/3.json": [
        Sample(
            [
                r"I write $\frac{x^2 + 7}{\sqrt{x^2 + 3}} = \sqrt{x^2 + 3} + \frac{4}{\sqrt{x^2 + 3}}$.",
                r"With $t = \sqrt{x^2 + 3} \ge \sqrt{3}$, the expression is $t + \frac{4}{t}$.",
                r"By AM-GM, $t + \frac{4}{t} \ge 2\sqrt{4} = 4$, with equality at $t = 2$.",
                r"Since $2 \ge \sqrt{3}$, $t = 2$ is reached at $x = \pm 1$, so the minimum is $4$.",
            ],
            "4",
        ),
        Sample(
            [
                r"I'll look at how the expression changes with $x$.",
                r"The numerator $x^2 + 7$ is smallest at $x = 0$, so the whole expression is smallest at $x = 0$.",
                r"At $x = 0$ it equals $\frac{7}{\sqrt{3}}$.",
                r"Rationalizing, the minimum is $\frac{7\sqrt{3}}{3}$.",
            ],
            r"\frac{7\sqrt{3}}{3}",
            error=1,
        ),
        Sample(
            [
                r"Substitute $u = x^2 + 3 \ge 3$, so $x^2 + 7 = u + 4$.",
                r"The expression is $\frac{u + 4}{\sqrt{u}} = \sqrt{u} + \frac{4}{\sqrt{u}}$.",
                r"This function of $u$ is increasing for $u \ge 3$, so its minimum is at $u = 3$.",
                r"The minimum is $\sqrt{3} + \frac{4}{\sqrt{3}} = \frac{7\sqrt{3}}{3}$.",
            ],
            r"\frac{7\sqrt{3}}{3}",
            error=2,
        ),
    ],
    "stepwise-demo/number_theory/1.json": [
        Sample(
            [
                r"Modulo $5$, the powers of $7$ are $7 \equiv 2$, $7^2 \equiv 4$, $7^3 \equiv 3$, $7^4 \equiv 1$.",
                r"So they repeat every $4$ powers.",
                r"Since $100$ is divisible by $4$, $7^{100} \equiv 1 \pmod{5}$.",
                r"The remainder is $1$.",
            ],
            "1",
        ),
        Sample(
            [
                r"$7 \equiv 2 \pmod{5}$, so I need $2^{100}$ modulo $5$.",
                r"The powers of $2$ modulo $5$ are $2, 4, 3, 1, 2, 4, 3, 1, \ldots$, repeating every $4$.",
                r"Since $100 \equiv 0 \pmod{4}$, $2^{100}$ matches the first entry of the cycle, which is $2$.",
                r"So the remainder is $2$.",
            ],
            "2",
            error=2,
        ),
        Sample(
            [
                r"A number's remainder when divided by $5$ depends only on its last digit.",
                r"The last digits of $7, 7^2, 7^3, 7^4$ are $7, 9, 3, 1$, and then they repeat.",
                r"Since $100$ is a multiple of $4$, $7^{100}$ ends in $1$.",
                r"A number ending in $1$ leaves remainder $1$ when divided by $5$.",
            ],
            "1",
        ),
    ],
    "stepwise-demo/number_theory/2.json": [
        Sample(
            [
                r"I'll factor $720$ into primes.",
                r"$720 = 8 \cdot 90 = 2^3 \cdot 3^2 \cdot 5$.",
                r"The number of divisors is $(3 + 1)(2 + 1)(1 + 1)$.",
                r"That is $24$.",
            ],
            "24",
            error=1,
        ),
        Sample(
            [
                r"$720 = 2^4 \cdot 45 = 2^4 \cdot 3^2 \cdot 5$.",
                r"A divisor picks an exponent of $2$ from $0$ to $4$, of $3$ from $0$ to $2$, and of $5$ from $0$ to $1$.",
                r"That's $5 \cdot 3 \cdot 2$ choices.",
                r"So $720$ has $30$ divisors.",
            ],
            "30",
        ),
        Sample(
            [
                r"The prime factorization is $720 = 2^4 \cdot 3^2 \cdot 5^1$.",
                r"The number of divisors comes from the exponents.",
                r"Multiplying the exponents, $4 \cdot 2 \cdot 1 = 8$.",
                r"So $720$ has $8$ divisors.",
            ],
            "8",
            error=2,
            neutral=(1,),
        ),
    ],
    "stepwise-demo/number_theory/3.json": [
        Sample(
            [
                r"The numbers that leave remainder $3$ when divided by $5$ are $3, 8, 13, 18, 23, \ldots$",
                r"$3$ is divisible by $3$, so it fails; $8$ leaves remainder $2$ when divided by $3$ but remainder $1$ when divided by $7$.",
                r"$13$ leaves remainder $1$ and $18$ remainder $0$ when divided by $3$, so they fail.",
                r"$23 = 3 \cdot 7 + 2$ leaves remainder $2$ when divided by $3$ and when divided by $7$.",
                r"So the smallest such $n$ is $23$.",
            ],
            "23",
        ),
        Sample(
            [
                r"$n \equiv 2 \pmod{3}$ and $n \equiv 2 \pmod{7}$ mean that $n - 2$ is a multiple of $21$.",
                r"So $n = 21k + 2$ for some integer $k \ge 0$.",
                r"The third condition is $21k + 2 \equiv 3 \pmod{5}$; since $21 \equiv 2 \pmod{5}$, this is $2k \equiv 1 \pmod{5}$.",
                r"Multiplying by $3$, $k \equiv 3 \pmod{5}$, so the smallest choice is $k = 3$.",
                r"Then $n = 21 \cdot 3 + 2 = 65$.",
            ],
            "65",
            error=2,
        ),
        Sample(
            [
                r"The numbers that leave remainder $3$ when divided by $5$ are $3, 8, 13, 18, \ldots$",
                r"Among them, $8$ leaves remainder $2$ when divided by $3$.",
                r"And $8$ leaves remainder $2$ when divided by $7$ as well.",
                r"So $n = 8$.",
            ],
            "8",
            error=2,
        ),
    ],
    "stepwise-demo/prealgebra/1.json": [
        Sample(
            [
                r'"Of" means multiply, so I need $\frac{3}{4} \cdot \frac{2}{3} \cdot 48$.',
                r"$\frac{3}{4} \cdot \frac{2}{3} = \frac{6}{12} = \frac{1}{2}$.",
                r"Half of $48$ is $24$.",
                r"So the answer is $24$.",
            ],
            "24",
        ),
        Sample(
            [
                r"First I take $\frac{2}{3}$ of $48$.",
                r"$48 \div 3 = 16$, and $16 \cdot 2 = 36$.",
                r"Then $\frac{3}{4}$ of $36$ is $36 \div 4 \cdot 3 = 27$.",
                r"So the answer is $27$.",
            ],
            "27",
            error=1,
        ),
        Sample(
            [
                r"Multiplication can be done in any order, so I'll take $\frac{3}{4}$ of $48$ first.",
                r"$\frac{3}{4} \cdot 48 = 36$.",
                r"Then $\frac{2}{3}$ of $36$ is $24$.",
                r"So $\frac{3}{4}$ of $\frac{2}{3}$ of $48$ is $24$.",
            ],
            "24",
        ),
    ],
    "stepwise-demo/prealgebra/2.json": [
        Sample(
            [
                r"Let the original price be $p$.",
                r"Increasing by $20\%$ and then decreasing by $25\%$ is a net change of $-5\%$, so the final price is $0.95p$.",
                r"So $0.95p = 54$ and $p = \frac{54}{0.95} = \frac{1080}{19}$.",
                r"The original price was $\frac{1080}{19}$ dollars.",
            ],
            r"\frac{1080}{19}",
            error=1,
        ),
        Sample(
            [
                r"Working backwards, the price before the $25\%$ decrease was $\frac{54}{0.75} = 72$.",
                r"The price before the $20\%$ increase was $\frac{72}{1.2} = 60$.",
                r"Check: $60 \cdot 1.2 = 72$ and $72 \cdot 0.75 = 54$.",
                r"So the original price was $60$ dollars.",
            ],
            "60",
        ),
        Sample(
            [
                r"I'll undo the two changes in reverse order.",
                r"Undoing the $25\%$ decrease means increasing $54$ by $25\%$: $54 \cdot 1.25 = 67.5$.",
                r"Undoing the $20\%$ increase means decreasing by $20\%$: $67.5 \cdot 0.8 = 54$.",
                r"So the original price was $54$ dollars.",
            ],
            "54",
            error=1,
        ),
    ],
    "stepwise-demo/prealgebra/3.json": [
        Sample(
            [
                r"Let the removed number be $r$ and let the other four add up to $S$.",
                r"Then $S + r = 5 \cdot 12 = 60$.",
                r"And $S = 4 \cdot 10 = 40$.",
                r"So $r = 60 - 40 = 20$.",
            ],
            "20",
        ),
        Sample(
            [
                r"The five numbers add up to $5 \cdot 12 = 60$.",
                r"The remaining four have mean $10$.",
                r"So the remaining four add up to $10 \cdot 5 = 50$.",
                r"The removed number is $60 - 50 = 10$.",
            ],
            "10",
            error=2,
        ),
        Sample(
            [
                r"Write each of the five numbers as $12$ plus a deviation; the five deviations add up to $0$.",
                r"The four remaining numbers average $10$, so their deviations add up to $4 \cdot (10 - 12) = -8$.",
                r"So the removed number's deviation is $+8$.",
                r"The removed number is $12 + 8 = 20$.",
            ],
            "20",
        ),
    ],
    "stepwise-demo/precalculus/1.json": [
        Sample(
            [
                r"The angle satisfies $\cos \theta = \frac{\mathbf{u} \cdot \mathbf{v}}{\|\mathbf{u}\| \, \|\mathbf{v}\|}$.",
                r"The dot product is $1 \cdot 1 + 1 \cdot 0 + 0 \cdot 1 = 1$.",
                r"The product of the lengths is $\sqrt{2 \cdot 1} = \sqrt{2}$.",
                r"So $\cos \theta = \frac{1}{\sqrt{2}}$ and $\theta = 45^\circ$.",
            ],
            r"45^\circ",
            error=2,
        ),
        Sample(
            [
                r"Both vectors have length $\sqrt{2}$.",
                r"The distance between their tips is the length of $(1, 1, 0) - (1, 0, 1) = (0, 1, -1)$, which is $\sqrt{2}$.",
                r"So the two vectors and the segment joining their tips form an equilateral triangle.",
                r"The angle between the vectors is therefore $60^\circ$.",
            ],
            r"60^\circ",
        ),
        Sample(
            [
                r"I'll use $\|\mathbf{u} \times \mathbf{v}\| = \|\mathbf{u}\| \, \|\mathbf{v}\| \sin \theta$.",
                r"The cross product is $(1, -1, -1)$, of length $\sqrt{3}$.",
                r"So $\sin \theta = \frac{\sqrt{3}}{2}$.",
                r"The angle is $120^\circ$, since the vectors point away from each other.",
            ],
            r"120^\circ",
            error=3,
        ),
    ],
    "stepwise-demo/precalculus/2.json": [
        Sample(
            [
                r"I'll use the rule of Sarrus.",
                r"The three down-right products are $2(-1)(0) = 0$, $1 \cdot 4 \cdot 1 = 4$, and $3 \cdot 0 \cdot 2 = 0$.",
                r"The three up-right products are $3(-1)(1) = -3$, $2 \cdot 4 \cdot 2 = 16$, and $1 \cdot 0 \cdot 0 = 0$.",
                r"So the determinant is $(0 + 4 + 0) - (-3 + 16 + 0) = 4 - 13 = -9$.",
            ],
            "-9",
        ),
        Sample(
            [
                r"A $3 \times 3$ determinant is the sum of the down-right diagonal products minus the sum of the up-right ones.",
                r"The down-right products are $0$, $4$, and $0$.",
                r"The up-right products are $3(-1)(1) = -3$, $2 \cdot 4 \cdot 2 = 16$, and $0$.",
                r"So the determinant is $(0 + 4 + 0) - (3 + 16 + 0) = 4 - 19 = -15$.",
            ],
            "-15",
            error=3,
        ),
        Sample(
            [
                r"I'll row reduce: subtracting $\frac{1}{2}$ of row $1$ from row $3$ does not change the determinant.",
                r"Row $3$ becomes $\left(0, \frac{3}{2}, -\frac{3}{2}\right)$.",
                r"Expanding along the first column, $D = 2\left((-1)\left(-\frac{3}{2}\right) + 4 \cdot \frac{3}{2}\right)$.",
                r"So $D = 2 \cdot \frac{15}{2} = 15$.",
            ],
            "15",
            error=2,
        ),
    ],
    "stepwise-demo/precalculus/3.json": [
        Sample(
            [
                r"$\sin 2x = \cos x$ becomes $2 \sin x \cos x = \cos x$.",
                r"So $\cos x \, (2 \sin x - 1) = 0$.",
                r"$\cos x = 0$ gives $x = \frac{\pi}{2}$ in $[0, 2\pi)$.",
                r"$\sin x = \frac{1}{2}$ gives $x = \frac{\pi}{6}$ and $x = \frac{5\pi}{6}$.",
                r"So there are $3$ solutions.",
            ],
            "3",
            error=2,
        ),
        Sample(
            [
                r"Using $\sin 2x = 2 \sin x \cos x$, the equation becomes $\cos x \, (2 \sin x - 1) = 0$.",
                r"On $[0, 2\pi)$, $\cos x = 0$ at $\frac{\pi}{2}$ and $\frac{3\pi}{2}$.",
                r"And $\sin x = \frac{1}{2}$ at $\frac{\pi}{6}$ and $\frac{5\pi}{6}$.",
                r"At $\frac{\pi}{2}$ and $\frac{3\pi}{2}$ the sine is $\pm 1$, not $\frac{1}{2}$, so the two sets do not overlap.",
                r"So there are $4$ solutions.",
            ],
            "4",
        ),
        Sample(
            [
                r"The equation is $2 \sin x \cos x = \cos x$.",
                r"Factoring, $\cos x \, (2 \sin x - 1) = 0$.",
                r"$\cos x = 0$ at $x = \frac{\pi}{2}$ and $x = \frac{3\pi}{2}$.",
                r"$\sin x = \frac{1}{2}$ at $x = \frac{\pi}{6}, \frac{5\pi}{6}, \frac{7\pi}{6},$ and $\frac{11\pi}{6}$.",
                r"That's $6$ solutions in total.",
            ],
            "6",
            error=3,
        ),
    ],
}


def build() -> tuple[list[dict], list[dict], list[dict]]:
    problems, solutions, labels = [], [], []
    n = 0
    for p in PROBLEMS:
        problems.append(
            {
                "problem": p.problem,
                "solution": p.solution,
                "answer": p.answer,
                "subject": p.subject,
                "level": p.level,
                "unique_id": p.unique_id,
            }
        )
        for s in p.samples:
            n += 1
            source_id = f"demo-{n}"
            correct = check_sample(s, p, source_id)
            solutions.append(
                {
                    "unique_id": p.unique_id,
                    "steps": s.full_steps(),
                    "answer": s.answer,
                    "generator": GENERATOR,
                    "source_id": source_id,
                }
            )
            labels.append(
                {
                    "source_id": source_id,
                    "ratings": s.ratings(),
                    "first_error": s.error,
                    "correct": correct,
                }
            )
    return problems, solutions, labels


def check_sample(s: Sample, p: Problem, source_id: str) -> bool:
    """Whether the sample's final answer is the problem's; asserts the sample is consistent."""
    correct = s.answer == p.answer
    # In this data set every wrong answer comes from a marked error
    # and every marked error leads to a wrong answer.
    assert correct == (s.error is None), (source_id, s.answer, p.answer)
    assert all(i < len(s.steps) for i in s.neutral), source_id
    if s.error is not None:
        assert s.error < len(s.steps) and all(i < s.error for i in s.neutral), source_id
    return correct


def build_pool() -> list[dict]:
    """The candidate pool's lines (import_pool's format: the solutions' keys; no labels)."""
    by_uid = {p.unique_id: p for p in PROBLEMS}
    assert set(POOL) == set(by_uid), "every problem has pool samples, and only those"
    rows, n = [], 0
    for p in PROBLEMS:
        for s in POOL[p.unique_id]:
            n += 1
            source_id = f"demo-pool-{n}"
            check_sample(s, p, source_id)
            rows.append(
                {
                    "unique_id": p.unique_id,
                    "steps": s.full_steps(),
                    "answer": s.answer,
                    "generator": GENERATOR,
                    "source_id": source_id,
                }
            )
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def validate() -> list[str]:
    """Check the written files against each other; return a list of problems."""
    errors = []
    problems = read_jsonl(HERE / "problems.jsonl")
    solutions = read_jsonl(HERE / "solutions.jsonl")
    labels = read_jsonl(HERE / "reference_labels.jsonl")

    keys = ["problem", "solution", "answer", "subject", "level", "unique_id"]
    by_uid = {}
    for p in problems:
        if list(p) != keys:
            errors.append(f"problem keys {list(p)}")
        if not isinstance(p["level"], int) or not 1 <= p["level"] <= 5:
            errors.append(f"{p['unique_id']}: bad level")
        if "\\boxed{" not in p["solution"]:
            errors.append(f"{p['unique_id']}: solution has no \\boxed answer")
        if p["unique_id"] in by_uid:
            errors.append(f"duplicate unique_id {p['unique_id']}")
        by_uid[p["unique_id"]] = p

    steps_by_sid = {}
    for s in solutions:
        sid = s.get("source_id")
        if set(s) != {"unique_id", "steps", "answer", "generator", "source_id"}:
            errors.append(f"{sid}: solution keys {sorted(s)}")
        if s["unique_id"] not in by_uid:
            errors.append(f"{sid}: unknown unique_id {s['unique_id']}")
        if not 4 <= len(s["steps"]) <= 12:
            errors.append(f"{sid}: {len(s['steps'])} steps")
        if not s["steps"][-1].endswith(ANSWER_SEP + s["answer"]):
            errors.append(f"{sid}: last step does not end with the # Answer block")
        if any("# Answer" in step for step in s["steps"][:-1]):
            errors.append(f"{sid}: # Answer before the last step")
        if sid in steps_by_sid:
            errors.append(f"duplicate source_id {sid}")
        steps_by_sid[sid] = s

    labelled = set()
    for lab in labels:
        sid = lab["source_id"]
        labelled.add(sid)
        if sid not in steps_by_sid:
            errors.append(f"label for unknown source_id {sid}")
            continue
        sol = steps_by_sid[sid]
        ratings, fe = lab["ratings"], lab["first_error"]
        if not ratings or len(ratings) > len(sol["steps"]):
            errors.append(f"{sid}: {len(ratings)} ratings for {len(sol['steps'])} steps")
        if any(r not in (-1, 0, 1) for r in ratings):
            errors.append(f"{sid}: rating outside -1/0/1")
        neg = [i for i, r in enumerate(ratings) if r == -1]
        if fe is None:
            if neg or len(ratings) != len(sol["steps"]):
                errors.append(f"{sid}: no first_error but ratings {ratings}")
        elif neg != [fe] or fe != len(ratings) - 1:
            errors.append(f"{sid}: first_error {fe} inconsistent with ratings {ratings}")
        truth = by_uid[sol["unique_id"]]["answer"]
        if lab["correct"] != (sol["answer"] == truth):
            errors.append(
                f"{sid}: correct={lab['correct']} but answer {sol['answer']!r} vs {truth!r}"
            )
    missing = set(steps_by_sid) - labelled
    if missing:
        errors.append(f"solutions without labels: {sorted(missing)}")
    return errors + validate_pool(by_uid, steps_by_sid)


def validate_pool(by_uid: dict[str, dict], labeled: dict[str, dict]) -> list[str]:
    """pool.jsonl: well-formed lines, new content (no labeled solution again), and for every
    problem at least one right and one wrong final answer."""
    errors = []
    labeled_steps = {tuple(s["steps"]) for s in labeled.values()}
    seen: set[str] = set()
    answers: dict[str, set[bool]] = {uid: set() for uid in by_uid}
    for s in read_jsonl(HERE / "pool.jsonl"):
        sid = s.get("source_id")
        if set(s) != {"unique_id", "steps", "answer", "generator", "source_id"}:
            errors.append(f"{sid}: pool keys {sorted(s)}")
            continue
        if s["unique_id"] not in by_uid:
            errors.append(f"{sid}: unknown unique_id {s['unique_id']}")
            continue
        if not 4 <= len(s["steps"]) <= 12:
            errors.append(f"{sid}: {len(s['steps'])} steps")
        if not s["steps"][-1].endswith(ANSWER_SEP + s["answer"]):
            errors.append(f"{sid}: last step does not end with the # Answer block")
        if sid in seen or sid in labeled:
            errors.append(f"duplicate source_id {sid}")
        seen.add(sid)
        if tuple(s["steps"]) in labeled_steps:
            errors.append(f"{sid}: the same steps as a labeled solution")
        answers[s["unique_id"]].add(s["answer"] == by_uid[s["unique_id"]]["answer"])
    for uid, kinds in answers.items():
        if kinds != {True, False}:
            errors.append(f"{uid}: the pool needs a right and a wrong final answer")
    return errors


def main() -> int:
    problems, solutions, labels = build()
    write_jsonl(HERE / "problems.jsonl", problems)
    write_jsonl(HERE / "solutions.jsonl", solutions)
    write_jsonl(HERE / "reference_labels.jsonl", labels)
    pool = build_pool()
    write_jsonl(HERE / "pool.jsonl", pool)
    errors = validate()
    for e in errors:
        print("error:", e, file=sys.stderr)
    n_correct = sum(lab["correct"] for lab in labels)
    answer_of = {p["unique_id"]: p["answer"] for p in problems}
    print(
        f"{len(problems)} problems, {len(solutions)} solutions "
        f"({n_correct} correct, {len(solutions) - n_correct} wrong, "
        f"{sum(0 in lab['ratings'] for lab in labels)} with a 0-rated step); "
        f"pool: {len(pool)} solutions "
        f"({sum(row['answer'] == answer_of[row['unique_id']] for row in pool)} correct)"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
