/// <reference path="../../../sandbox/tally.d.ts" />
// Move money between two wallets. The funds check is not here: the overdraft guard (velocity.json,
// a control on each customer's set of accounts) refuses a posting that leaves the sender's accounts
// together below zero, and this turns that refusal into "insufficient funds".

const POST = 'mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }';
const AVAILABLE = 'available(layer: PENDING) { normalBalance { units } }';
const BALANCE = `query($id: UUID!) { account(id: $id) { balance(currency: "USD") { ${AVAILABLE} } } }`;
const GUARDED = `name balance(currency: "USD") { ${AVAILABLE} } controls(first: 1) { nodes { velocityControlId } }`;
const SETS = `query($id: UUID!) { account(id: $id) { ${GUARDED} sets(first: 10) { nodes { ${GUARDED} } } } }`;

function available(accountId) {
  return decimal(graphql(BALANCE, { id: accountId }).account.balance.available.normalBalance.units);
}

/** What the sender may spend: the least available of it and its sets that have a control attached. */
function spendable(accountId) {
  const account = graphql(SETS, { id: accountId }).account;
  const guarded = [account, ...account.sets.nodes].filter((owner) => owner.controls.nodes.length > 0);
  return (guarded.length > 0 ? guarded : [account])
    .map((owner) => ({ name: owner.name, units: decimal(owner.balance.available.normalBalance.units) }))
    .reduce((least, next) => (next.units.lt(least.units) ? next : least));
}

function run(event) {
  // fee has a default in the input schema ("0"): it is always there.
  const { transaction_id, from, to, amount, fee } = event.data;
  try {
    graphql(POST, { i: { transactionId: transaction_id, tranCode: 'TRANSFER', params: { from, to, amount, fee } } });
  } catch (error) {
    if (error.code !== 'BALANCE_VELOCITY_EXCEEDED') throw error;
    // The posting is gone; the balances read now are those before it.
    const least = spendable(from);
    fail(
      `insufficient funds: ${decimal(amount).plus(fee).toFixed(2)} needed, ${least.units.toFixed(2)} available in ${least.name}`,
      "A customer's accounts together may not go below zero (the overdraft guard): deposit first, or send less.",
      { retry: false },
    );
  }
  return { transaction_id, from_available: available(from).toFixed(2), to_available: available(to).toFixed(2) };
}
