"""Provides the tuner's confirmation: alternating A/B rounds in fresh processes, more while the answer is open."""

from __future__ import annotations

import math
from pitstop.analysis import median_and_spread
from pitstop.errors import UsageError
from pitstop.tuning.results import Candidate, TrialResult, judge_losses
from pitstop.tuning.trials import MIN_CONFIRM_TRIALS, Trials
from pitstop.tuning.verdict import (Contest, Outcome, claim_interval, load_noise, log_sd, paired_ratios,
                                    ratio_spread)

# While the answer is open (the noise is larger than the effect), rounds go on up to this many.
MAX_ROUNDS = 8
# A round whose contestants ran with other processes' load differing by more than half a core
# is not a pair: on the 2-core box one neighbour's core moved a plain loop from 34 ms to 0.9-1.4 s
# per step, so such a round measures the neighbour. It is discarded and run again.
LOAD_CHANGE_CORES = 0.5
# Other processes' cores from which confirmation runs shorter trials, in more rounds: drift then
# falls within a round instead of between its two halves.
BUSY_SLICE_CORES = 0.25


def _counts(r: TrialResult) -> bool:
    """A confirmation run with a figure (an unstable one counts: the rounds' spread widens the noise)."""
    return r.ok or (r.status == "unstable" and r.throughput is not None)


class Judgement:
    """What the rounds so far say: the noise, each contestant's paired ratios, and whether it is decided."""

    def __init__(self, search: Trials, contests: dict[Candidate, Contest]) -> None:
        base_c = contests[Candidate()]
        self.base = base_c
        self.alive = [c for c in contests.values() if not c.failure and c.runs and c is not base_c]
        runs = [r for c in contests.values() for r in c.runs]
        self.ratios = {c.candidate: paired_ratios(c, base_c) for c in self.alive}
        spreads = [s for r in self.ratios.values() if (s := ratio_spread(r)) is not None]
        self.measured_noise = bool(spreads)
        # The load term stands for one pair's disturbance; n rounds average n/2 of the two-round design's pairs.
        rounds = min((len(c.runs) for c in contests.values() if c.runs), default=1)
        load = load_noise(runs, search._cpus) / math.sqrt(max(1.0, rounds / 2))
        self.noise = max([search.noise_floor, load, *spreads]) if spreads else search.noise(*runs)
        self.score = {c: median_and_spread(r)[0] or 0.0 for c, r in self.ratios.items() if r}
        # A pick beats the baseline by more than the noise, and no round measured it slower.
        self.beaters = [c for c in self.alive if self.score.get(c.candidate, 0.0) > 1.0 + self.noise
                        and min(self.ratios[c.candidate]) > 1.0]
        # Open: an effect worth having (beyond the floor) that the noise hides; below the floor
        # more rounds cannot tell anything apart.
        # A contestant a round measured slower is decided: it is never picked, however many rounds follow.
        self.open = not self.beaters and any(
            self.score.get(c.candidate, 0.0) > 1.0 + search.noise_floor and min(self.ratios[c.candidate]) > 1.0
            for c in self.alive)


class Confirming(Trials):
    """The confirmation half of the search: the A/B contest of what exploration found, and its verdict."""

    def _confirm(self, base: TrialResult, stopped: str) -> Outcome:
        out = Outcome(baseline=base, results=self.results, space=self.space, stopped=stopped,
                      notes=self.notes)
        # The incumbent and the best other measured configuration (the two best measured when
        # exploration adopted nothing): the fullest contest the budget allows uses its reserve.
        ranked: list[Candidate] = []
        for r in sorted(self.challengers(), key=lambda r: -(self.ratio(r) or 0.0)):
            if r.candidate not in ranked and r.candidate != self.inc:
                ranked.append(r.candidate)
        contestants = ([self.inc] if self.inc != Candidate() else []) + ranked
        if self.inc != Candidate() and ranked and self._clearly_ahead(ranked[0], self.inc):
            # Exploration measured it beyond twice the noise past the incumbent, then ran out of
            # budget before adopting it: it leads the contest (the pair a small budget affords).
            contestants = [ranked[0], self.inc]
        contestants = contestants[:2]
        if not contestants:
            others = [r for r in self.results if r.candidate != Candidate()]
            why = ("only the script's own settings were measured" + (" before --budget ran out" if stopped else "")
                   if not others else "every other configuration failed" if not any(r.ok for r in others)
                   else "")
            return self._no_gain(out, why)
        contestants.append(Candidate())
        return self.contest(out, contestants)

    def _clearly_ahead(self, challenger: Candidate, incumbent: Candidate) -> bool:
        """Whether exploration measured `challenger` ahead of `incumbent` by more than twice the noise."""
        def best(cand: Candidate) -> float:
            return max((self.ratio(r) or 0.0 for r in self.results if r.ok and r.candidate == cand), default=0.0)

        mine, theirs = best(incumbent), best(challenger)
        return mine > 0 and theirs > mine * (1.0 + self.noise()) ** 2

    def confirm_only(self, candidate: Candidate) -> Outcome:
        """`--confirm`: the candidate against the script's own settings, alternating fresh runs, nothing else."""
        if not self.budget.allows(MIN_CONFIRM_TRIALS, 0.0):
            raise UsageError(f"--budget allows no confirmation round: it needs at least {MIN_CONFIRM_TRIALS} trials")
        self.planned = MIN_CONFIRM_TRIALS * self.confirm_rounds
        out = self.contest(Outcome(baseline=None, results=self.results, notes=self.notes),
                           [candidate, Candidate()])
        out.baseline = next((r for r in self.results if r.ok and r.candidate == Candidate()), None)
        return out

    def _slice(self) -> tuple[int, float]:
        """Steps and expected seconds of one confirmation run: shorter on a busy machine, in more rounds."""
        busy = [r.other_cpu for r in self.results if r.other_cpu is not None]
        if busy and max(busy) >= BUSY_SLICE_CORES and self.steps < self.long:
            return self.steps, self._base_duration or self._long_cost()
        return self.long, self._long_cost()

    def contest(self, out: Outcome, contestants: list[Candidate]) -> Outcome:
        """Alternating fresh runs of `contestants` (the baseline last), as many rounds as the budget allows
        while the answer is open."""
        steps, cost = self._slice()
        pair = [contestants[0], Candidate()]
        shape: tuple[list[Candidate], int] | None = None
        # The fullest contest the budget allows: all contestants in every round,
        # then the first against the baseline alone, then a single round.
        for names, n in ((contestants, self.confirm_rounds), (pair, self.confirm_rounds), (pair, 1)):
            if self.budget.allows(n * len(names), n * len(names) * cost):
                shape = (names, n)
                break
        contests = {c: Contest(c) for c in pair}
        lead: list[tuple[Candidate, TrialResult]] = []  # a round's first half already run
        if shape is None:
            last = self.results[-1] if self.results else None
            if (last is None or not last.ok or last.candidate != pair[0] or last.from_journal
                    or not self.budget.allows(1, cost)):
                return self._unconfirmed(out, MIN_CONFIRM_TRIALS * self.confirm_rounds, cost)
            # One trial left, and the challenger ran last: a fresh run of the script's own settings
            # right after it, at the same steps, completes a back-to-back round (a rung climbed
            # past the finding's worker count took the trial the round's first half would have).
            contests[pair[0]].runs.append(last)
            lead = [(pair[0], last)]
            shape = ([Candidate()], 1)
            steps = last.steps
            self.notes.append(f"one confirmation round: {last.candidate.label()}'s last exploration run, then "
                              "a fresh run of the script's own settings (the budget had one trial left)")
        names, rounds = shape
        contests = {c: contests.get(c, Contest(c)) for c in dict.fromkeys([*pair, *names] if lead else names)}
        done = discarded = 0
        loads: list[float] = []
        i = 0
        while True:
            if done >= rounds:
                judged = Judgement(self, contests)
                if not judged.open or done >= MAX_ROUNDS:
                    break
                live = [c for c in names if not contests[c].failure]
                if len(live) < 2 or not self.budget.allows(len(live), len(live) * cost):
                    break
                names = live
            order = names if i % 2 == 0 else list(reversed(names))
            i += 1
            ran = self._round(contests, order, steps)
            whole, lead = lead + ran, []
            change = _load_change([r for _, r in whole])
            loads += [r.other_cpu for _, r in whole if r.other_cpu is not None]
            if change is not None and change > LOAD_CHANGE_CORES and self._load_moved_it(whole):
                # Its runs measured different machines: drop the round, run another in its place.
                for cand, r in ran:
                    contests[cand].runs.remove(r)
                    self.set_aside.add(id(r))
                discarded += 1
                self.notes.append(f"confirmation round {i} discarded: other processes' load changed by "
                                  f"{change:.1f} cores between its runs")
                if discarded > MAX_ROUNDS or not self.budget.allows(len(names), len(names) * cost):
                    break
                continue
            done += 1
        out.load = (min(loads), max(loads)) if loads else None
        out.cpus = self._cpus
        out.discarded = discarded
        if not done:
            # Every round measured the neighbours: what stands is the exploration's figure, unconfirmed.
            out = self._unconfirmed(out, MIN_CONFIRM_TRIALS * rounds, cost)
            if out.winner is not None and out.winner != Candidate():
                out.message = (f"not confirmed: all {discarded} confirmation round(s) were discarded (other "
                               "processes' load moved by more than half a core within each); the figure is "
                               "from the exploration runs")
            return out
        out.contests = list(contests.values())
        out.confirmed, out.rounds = True, done
        self._judge_amp(out.contests)
        return self._decide(out, contests, done)

    def _load_moved_it(self, ran: list[tuple[Candidate, TrialResult]]) -> bool:
        """Whether a round whose neighbours' load moved measured the load: only then is it dropped.

        Its ratio is checked against the exploration's, measured in other
        processes: a round that agrees with it within the noise was not swayed
        (a 2.9x workers win measured 2.89x in a round whose load moved 0.6 cores
        and 2.80x in exploration, and was dropped, leaving no round). A neighbour
        that spins torch's threads moves a step 30-fold: that never agrees.
        """
        base = next((r for c, r in ran if c == Candidate()), None)
        if base is None or not base.throughput:
            return True
        this = {id(r) for _, r in ran}
        tolerance = max(self.noise_floor, 2.0 * self.noise())  # two ratios, each of two noisy runs
        for cand, r in ran:
            if cand == Candidate():
                continue
            explored = [x for x in self.results if x.ok and x.candidate == cand and id(x) not in this]
            ratios = [q for x in explored if (q := self.ratio(x)) is not None]
            if not ratios or not r.throughput:
                return True
            expected = median_and_spread(ratios)[0] or 0.0
            if expected <= 0 or abs(math.log((r.throughput / base.throughput) / expected)) > math.log1p(tolerance):
                return True
        return False

    def _round(self, contests: dict[Candidate, Contest], order: list[Candidate], steps: int
               ) -> list[tuple[Candidate, TrialResult]]:
        """One run of each live contestant in `order`; its counted runs, in order."""
        ran: list[tuple[Candidate, TrialResult]] = []
        for cand in order:
            contest = contests[cand]
            if contest.failure:
                continue
            res = self._run(cand, steps, "confirm", explore=False)
            if _counts(res):
                contest.runs.append(res)
                ran.append((cand, res))
                if not res.ok:
                    self.notes.append(f"{cand.label()}: unstable in one confirmation run ({res.reason}); "
                                      "counted, and the rounds' spread widens the noise")
            else:
                contest.failure = f"{res.status} in confirmation: {res.reason}"
        return ran

    def _judge_amp(self, contests: list[Contest]) -> None:
        """AMP's losses, now that the script's own settings ran more than once (the confirmation's rounds)."""
        refs = [r.losses for r in self.results if r.ok and r.candidate == Candidate() and r.losses]
        for c in contests:
            if c.failure or c.candidate.get("amp") in (None, "off") or c.candidate.get("batch_size"):
                continue
            for run in c.runs:
                verdict, why = judge_losses(run.losses, refs)
                if verdict == "diverged":
                    c.failure = f"diverged in confirmation: {why}"
                    break
                if verdict == "unjudged" and why not in self.notes:
                    self.notes.append(f"{c.candidate.label()}: {why}")

    def _decide(self, out: Outcome, contests: dict[Candidate, Contest], rounds: int) -> Outcome:
        """The verdict of the rounds, on paired ratios: each contestant over the baseline of the same round.

        A machine whose load drifts between rounds moves both sides of a pair
        alike; the pairs' disagreement is the noise (and the load, and the floor).
        """
        judged = Judgement(self, contests)
        noise, base_c = judged.noise, judged.base
        if not judged.measured_noise and rounds < 2:
            self.notes.append("one confirmation round: the noise is the exploration trials' "
                              f"(±{noise:.1%}), not measured by repeated rounds; the interval rests on each "
                              "run's own spread and on the configurations' other runs, and is wider")
        out.noise = out.spread = noise
        if base_c.failure or not base_c.runs:
            out.message = (f"the script's own settings failed in confirmation ({base_c.failure}): "
                           "nothing can be compared with them; keeping them")
            out.winner = Candidate()
            return out
        out.baseline_throughput = base_c.median
        left = self.budget.left()
        if judged.open:
            more = "" if rounds >= MAX_ROUNDS else "; a larger --budget runs more rounds"
            self.notes.append(f"undecided after {rounds} confirmation round(s): the noise (±{noise:.1%}) is "
                              f"larger than the effect (budget {left} left){more}")
        elif self.budget.allows(MIN_CONFIRM_TRIALS, MIN_CONFIRM_TRIALS * self._slice()[1]):
            floor = 1.0 + self.noise_floor
            which = ("a win beyond the noise" if judged.beaters
                     else "slower than the script's own settings"
                     if any(v * (1.0 + noise) < 1.0 for v in judged.score.values())
                     else f"no effect beyond the {self.noise_floor:.0%} floor"
                     if all(v <= floor for v in judged.score.values())
                     else "slower than the script's own settings in a round")
            self.notes.append(f"stopped with budget {left} left: decided after {rounds} confirmation round(s) "
                              f"({which})")
        score, ratios = judged.score, judged.ratios
        if not judged.beaters:
            out.winner, out.throughput, out.speedup = Candidate(), base_c.median, 1.0
            shown = ", ".join(f"{c.candidate.label()} x{score[c.candidate]:.2f}" for c in judged.alive
                              if c.candidate in score)
            slower = [c for c in judged.alive if c.candidate in score and score[c.candidate] * (1.0 + noise) < 1.0]
            if slower:  # a config at x0.51 read "nothing beat the script's own settings by more than the noise"
                out.message = ("slower than the script's own settings beyond the noise (±{:.1%}): {}".format(
                    noise, ", ".join(f"{c.candidate.label()} x{score[c.candidate]:.2f}" for c in slower)))
                return out
            out.message = ("nothing beat the script's own settings by more than the noise "
                           f"(±{noise:.1%})" + (f": {shown} in the rounds" if shown else ""))
            if rounds < 2 and any(v > 1.0 for v in score.values()):
                out.message += ("; one round cannot separate that from the noise: a larger --budget "
                                "runs two rounds")
            return out
        top = max(judged.beaters, key=lambda c: score[c.candidate])
        close = [c for c in judged.beaters if score[c.candidate] * (1.0 + noise) >= score[top.candidate]]
        win = min(close, key=lambda c: c.candidate.cost())
        mine = ratios[win.candidate]
        out.winner = win.candidate
        out.throughput = win.median
        out.interval = self._interval(list(zip(win.runs, base_c.runs)))
        out.speedup = min(mine)  # the conservative figure: every round measured at least this
        if top is not win:
            out.message = (f"{win.candidate.label()} chosen over {top.candidate.label()}: "
                           f"within the noise (±{noise:.1%}) and simpler")
        return out

    def _interval(self, pairs: list[tuple[TrialResult, TrialResult]]) -> tuple[float, float] | None:
        """The claim's interval from (challenger, baseline) pairs; one pair borrows the A/A of their other runs."""
        runs = [r for pair in pairs for r in pair]
        floor = max(self.noise_floor, load_noise(runs, self._cpus))
        between = None
        if len(pairs) == 1:
            # How far each configuration's runs moved between fresh processes (exploration and
            # confirmation): what a second round would have measured.
            each = [log_sd([r.throughput or 0.0 for r in self.results
                            if (r.ok or r.status == "unstable") and r.throughput and r.candidate == run.candidate
                            and id(r) not in self.set_aside])
                    for run in pairs[0]]
            known = [v for v in each if v is not None]
            if known:
                between = math.sqrt(sum(v * v for v in known) + (len(each) - len(known)) * max(known) ** 2)
            else:
                between = math.sqrt(2.0) * self.noise()  # two runs, each as noisy as exploration's typical one
        return claim_interval(pairs, floor, between)

    def _no_gain(self, out: Outcome, why: str) -> Outcome:
        base = self._baseline_at(self.steps) or out.baseline
        out.winner = Candidate()
        out.throughput = out.baseline_throughput = base.throughput if base else None
        out.speedup = 1.0
        out.noise = out.spread = self.noise()
        out.message = why or "nothing beat the script's own settings by more than the noise"
        return out

    def _unconfirmed(self, out: Outcome, trials: int, cost: float) -> Outcome:
        """No budget for a confirmation: keep a clear measured win, marked unconfirmed, with what confirming costs."""
        noise = self.noise()
        pick: TrialResult | None = None
        if self.inc != Candidate():
            same = [r for r in self.results if r.ok and r.candidate == self.inc]
            pick = max(same, key=lambda r: r.steps) if same else None
        best = self.best_measured()
        if pick is None and best is not None and (self.ratio(best) or 0.0) > (1.0 + noise) ** 2:
            pick = best  # a clear win: beyond twice the noise
        if pick is not None and pick.loss_check == "pending":
            self.notes.append(f"{pick.candidate.label()} not chosen: its losses differ from the one run of the "
                              "script's own settings, and no budget was left to tell whether they repeat")
            pick = None
        if pick is None:
            return self._no_gain(out, "")
        ratio = self.ratio(pick) or 1.0
        base = self._baseline_at(pick.steps)
        out.winner = pick.candidate
        out.throughput = pick.throughput
        out.baseline_throughput = base.throughput if base else None
        out.speedup = ratio
        out.interval = self._interval([(pick, base)] if base else [])
        out.noise = out.spread = noise
        out.confirm_trials = trials
        out.confirm_seconds = trials * cost
        out.message = ("not confirmed: the budget ran out before the alternating A/B rounds; the figure is "
                       "from the exploration runs")
        return out


def _load_change(ran: list[TrialResult]) -> float | None:
    """How far other processes' load moved between one round's runs, in cores (None: not read)."""
    loads = [r.other_cpu for r in ran if r.other_cpu is not None]
    return max(loads) - min(loads) if len(loads) > 1 else None
